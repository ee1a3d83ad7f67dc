# logs: rotation settings, and disabled log collection for a second task.
job "logs-docs" {
  group "app" {
    task "chatty" {
      driver = "docker"

      config {
        image = "busybox:1.36"
        args  = ["sh", "-c", "while true; do date; sleep 1; done"]
      }

      logs {
        max_files     = 3
        max_file_size = 15
      }
    }

    task "quiet" {
      driver = "docker"

      config {
        image = "busybox:1.36"
        args  = ["sleep", "86400"]
      }

      logs {
        disabled = true
      }
    }
  }
}
