# After hashicorp/nomad#25157 ("client: skip shutdown delay when tasks already deregistered"): a
# group with a shutdown_delay whose only task has crashed and is waiting out its restart delay when
# the job is stopped: there is nothing left to drain, the stop should not wait.
job "drained" {
  group "web" {
    shutdown_delay = "15s"

    restart {
      attempts = 3
      delay    = "60s"
      mode     = "fail"
    }

    task "web" {
      driver = "docker"

      config {
        image   = "busybox:1.36"
        command = "sh"
        args    = ["-c", "echo crashing; exit 1"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
