# Version 2 of nomad-23764-cni-args-v1.nomad.hcl: the same job, only its `cni { args }` changed.
job "cni-args" {
  group "app" {
    network {
      mode = "cni/lab-macvlan"

      cni {
        args = {
          FIELDLAB_REVISION = "2"
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
