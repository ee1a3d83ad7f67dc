# After hashicorp/nomad#24991 ("docker: respect image_pull_timeout"): a task that bounds its image
# pull with image_pull_timeout, started when the registry no longer answers. A prestart task holds
# the start back for 12 s, so that the pull begins once the scenario has made the registry hang.
job "pull-timeout" {
  group "app" {
    restart {
      attempts = 0
      mode     = "fail"
    }

    task "hold" {
      lifecycle {
        hook    = "prestart"
        sidecar = false
      }

      driver = "docker"

      config {
        image   = "busybox:1.36"
        command = "sleep"
        args    = ["12"]
      }

      resources {
        cpu    = 50
        memory = 32
      }
    }

    task "app" {
      driver = "docker"

      config {
        image              = "busybox:latest"
        image_pull_timeout = "3s"
        command            = "sleep"
        args               = ["3600"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
