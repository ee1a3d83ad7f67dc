# After hashicorp/nomad#11721 ("client: Fixed a bug where the allocation log streaming API was
# missing log frames that spanned log file rotation"): a task that writes ~1.8 MB of numbered lines
# to stdout at once, with 1 MB log files: its log spans a rotation, and `nomad alloc logs` must show
# every line.
job "chatty" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image   = "busybox:1.36"
        command = "sh"
        args    = ["-c", "i=0; while [ $i -lt 40000 ]; do echo \"line $i ........................................\"; i=$((i+1)); done; echo done; exec sleep 3600"]
      }

      logs {
        max_files     = 3
        max_file_size = 1
      }

      resources {
        cpu    = 200
        memory = 64
      }
    }
  }
}
