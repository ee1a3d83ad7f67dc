# periodic with the older single cron field, predefined expressions and enabled = false.
job "weekly-report" {
  type = "batch"

  periodic {
    cron    = "@weekly"
    enabled = false
  }

  group "report" {
    task "report" {
      driver = "exec"

      config {
        command = "/usr/local/bin/report"
      }
    }
  }
}
