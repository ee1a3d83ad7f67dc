# schedule (Enterprise): time-based task execution on weekdays, office hours.
job "office-hours" {
  group "tbte" {
    task "scheduled" {
      driver = "docker"

      config {
        image = "example/reporter:2"
      }

      schedule {
        cron {
          start    = "30 9 * * MON-FRI *"
          end      = "0 16"
          timezone = "America/New_York"
        }
      }
    }
  }
}
