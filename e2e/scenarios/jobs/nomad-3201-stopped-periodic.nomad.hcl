# After hashicorp/nomad#3201 ("Fix restoration of stopped periodic jobs"): a periodic job launched
# every minute, stopped with `nomad job stop` (not purged) after its first launch: it must launch
# nothing more, also after the agent that keeps its schedule restarts.
job "stopped-periodic" {
  type = "batch"

  periodic {
    cron = "* * * * *"
  }

  group "work" {
    task "work" {
      driver = "docker"

      config {
        image   = "busybox:1.36"
        command = "sleep"
        args    = ["30"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
