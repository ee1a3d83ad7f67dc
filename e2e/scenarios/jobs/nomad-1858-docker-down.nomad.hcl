# After hashicorp/nomad#1858 ("recoverable errors not handled", fixed by PR 1891 in 0.5.0): a task
# that exits every few seconds, on a host network (no pause container), with room in its restart
# policy. While dockerd is down its restarts cannot start a container; once dockerd is back they must.
job "flaky-engine" {
  group "app" {
    restart {
      attempts = 30
      interval = "10m"
      delay    = "2s"
      mode     = "fail"
    }

    task "app" {
      driver = "docker"

      config {
        image   = "busybox:1.36"
        command = "sh"
        args    = ["-c", "sleep 4; echo cycling; exit 1"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
