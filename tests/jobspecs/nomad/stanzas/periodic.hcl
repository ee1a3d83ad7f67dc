# periodic: a cron job that does not overlap, evaluated in a time zone.
job "nightly-backup" {
  type = "batch"

  periodic {
    crons            = ["0 2 * * *"]
    prohibit_overlap = true
    time_zone        = "America/New_York"
  }

  group "backup" {
    task "dump" {
      driver = "docker"

      config {
        image = "postgres:16"
        args  = ["pg_dumpall", "-h", "db.service.consul", "-f", "/alloc/data/dump.sql"]
      }
    }
  }
}
