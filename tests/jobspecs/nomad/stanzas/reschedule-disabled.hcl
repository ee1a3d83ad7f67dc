# reschedule disabled for a batch job: attempts = 0 and unlimited = false.
job "no-reschedule" {
  type = "batch"

  group "once" {
    reschedule {
      attempts  = 0
      unlimited = false
    }

    restart {
      attempts = 0
      mode     = "fail"
    }

    task "migrate" {
      driver = "docker"

      config {
        image = "example/migrations:42"
        args  = ["up"]
      }
    }
  }
}
