# After hashicorp/nomad#15215 ("client: avoid unconsumed channel in timer construction"): a task
# that fails a second after it starts, with a restart delay of 10s: each restart must wait it.
job "flaky" {
  group "app" {
    restart {
      attempts = 3
      interval = "5m"
      delay    = "10s"
      mode     = "fail"
    }

    task "app" {
      driver = "docker"

      config {
        image   = "busybox:1.36"
        command = "sh"
        args    = ["-c", "sleep 1; echo failing; exit 1"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
