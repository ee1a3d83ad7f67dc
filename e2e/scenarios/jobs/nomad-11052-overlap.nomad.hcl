# After hashicorp/nomad#11052 ("Multiple instances of a periodic job are run simultaneously, when
# prohibit_overlap is true"): a periodic job launched every minute whose child runs far longer than
# that, so every launch after the first must be skipped while the first child runs.
job "overlap" {
  type = "batch"

  periodic {
    cron             = "* * * * *"
    prohibit_overlap = true
  }

  group "work" {
    task "work" {
      driver = "docker"

      config {
        image   = "busybox:1.36"
        command = "sleep"
        args    = ["3600"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
