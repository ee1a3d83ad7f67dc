# After hashicorp/nomad#2246 ("Emit download begin/finished state event for docker images", fixed by
# PR 2165): a task left pending by a long image pull, whose events must say it is downloading. A
# prestart task holds the start back for 12 s, so that the pull begins once the scenario has made
# the registry hang.
job "slow-pull" {
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
        image_pull_timeout = "30s"
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
