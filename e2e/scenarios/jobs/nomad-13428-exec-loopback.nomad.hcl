# After hashicorp/nomad#13428 ("cni: Fixed a bug where loopback address was not set for all
# drivers"): an exec task in a bridge network that talks to a process of its own on 127.0.0.1 (an
# admin port, a local cache). It notes the state of its loopback interface.
job "loopback" {
  group "app" {
    network {
      mode = "bridge"
    }

    task "app" {
      driver = "exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "busybox ip link show lo > ${NOMAD_ALLOC_DIR}/lo.txt 2>&1; exec sleep 3600"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
