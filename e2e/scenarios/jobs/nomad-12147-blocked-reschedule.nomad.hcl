# After hashicorp/nomad#12147 ("Reschedule attempts limit is not respected when there is placement
# failures"): dispatched batch jobs that always fail, with one reschedule allowed, whose reschedule
# finds no node to place on for a while (here: the one node marked ineligible).
job "example" {
  type = "batch"

  parameterized {}

  group "example" {
    restart {
      attempts = 0
      mode     = "fail"
    }

    reschedule {
      attempts       = 1
      interval       = "24h"
      delay          = "5s"
      delay_function = "constant"
      unlimited      = false
    }

    task "example" {
      driver = "docker"

      config {
        image   = "busybox:1.36"
        command = "sh"
        args    = ["-c", "sleep 3; exit 1"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
