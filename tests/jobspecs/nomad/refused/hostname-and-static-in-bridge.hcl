# bridge network with a hostname, a static port and ignore_collision (Nomad 1.9).
# Nomad refuses it too: its job validation allows ignore_collision in host mode only ("collision may not be ignored on non-host network mode").
job "bridge-hostname" {
  group "g" {
    network {
      mode     = "bridge"
      hostname = "${NOMAD_JOB_NAME}-${NOMAD_ALLOC_INDEX}"

      port "dns" {
        static = 5353
        to     = 53
      }

      port "sync" {
        static           = 7946
        ignore_collision = true
      }
    }

    task "coredns" {
      driver = "docker"

      config {
        image = "coredns/coredns:1.11.1"
        ports = ["dns"]
      }
    }
  }
}
