# After hashicorp/nomad#23764 ("cni: network.cni jobspec updates now replace allocs to apply the new
# network config"): version 1 of a job on one of the client's CNI networks (the lab's macvlan
# conflist), with CNI_ARGS of its own; version 2 (nomad-23764-cni-args-v2.nomad.hcl) changes only
# the args. CNI_ARGS reach the plugins at the ADD of a new alloc only, so the update must replace it.
job "cni-args" {
  group "app" {
    network {
      mode = "cni/lab-macvlan"

      cni {
        args = {
          FIELDLAB_REVISION = "1"
        }
      }
    }

    task "app" {
      driver = "docker"

      config {
        image   = "busybox:1.36"
        command = "sh"
        args    = ["-c", "exec sleep 3600"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
