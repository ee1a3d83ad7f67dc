# After hashicorp/nomad#491 ("client/restart policy: Not restarting Batch Jobs if the exit code is
# 0", 0.2.1): a batch job whose task does its work once and exits 0.
job "once" {
  type = "batch"

  group "work" {
    restart {
      attempts = 3
      delay    = "2s"
      interval = "1m"
      mode     = "fail"
    }

    task "work" {
      driver = "docker"

      config {
        image   = "busybox:1.36"
        command = "sh"
        args    = ["-c", "echo did the work >> /alloc/runs.txt"]
      }
    }
  }
}
