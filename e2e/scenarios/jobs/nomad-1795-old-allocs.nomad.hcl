# After hashicorp/nomad#1795 ("Clients try to rerun old allocations after machine reboot"): a
# service job whose alloc failed (its task killed, no restart allowed) and was replaced; then the
# machine reboots. The report's job ran a docker image of its own; any long-running task shows it.
job "old-allocs" {
  group "app" {
    restart {
      attempts = 0
      mode     = "fail"
    }

    task "app" {
      driver = "docker"

      config {
        image = "redis:3.2"
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
