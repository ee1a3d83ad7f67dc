# action blocks: operator commands run with `nomad action` (job-specification/action).
job "actions-demo" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = "redis:7"
      }

      action "flush-cache" {
        command = "/usr/local/bin/redis-cli"
        args    = ["FLUSHALL"]
      }

      action "current-date" {
        command = "/bin/date"
      }

      action "info" {
        command = "/bin/sh"
        args    = ["-c", "redis-cli info | head -n 20"]
      }
    }
  }
}
