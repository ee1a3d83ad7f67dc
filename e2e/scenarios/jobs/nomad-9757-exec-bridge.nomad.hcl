# After hashicorp/nomad#9757 ("client: Fixed a bug where non-docker tasks with network isolation
# were restarted on client restart", 1.0.2): an exec task in a bridge network, as the report's
# (a long-running process the client must only reattach to when it restarts).
job "exec-bridge" {
  group "app" {
    network {
      mode = "bridge"
    }

    task "app" {
      driver = "exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "exec sleep 3600"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
