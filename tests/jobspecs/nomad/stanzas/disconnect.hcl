# disconnect: lost_after and stop_on_client_after in two groups (Nomad 1.8).
job "disconnect-docs" {
  group "edge" {
    disconnect {
      lost_after = "6h"
      replace    = false
      reconcile  = "keep_original"
    }

    task "sensor" {
      driver = "exec"

      config {
        command = "/usr/local/bin/sensor"
      }
    }
  }

  group "edge-strict" {
    disconnect {
      stop_on_client_after = "12h"
      replace              = true
      reconcile            = "best_score"
    }

    task "sensor" {
      driver = "exec"

      config {
        command = "/usr/local/bin/sensor"
      }
    }
  }
}
