# After hashicorp/nomad#28008 ("Batch job drain: replacement allocation placed when node is re-enabled
# before drain completes"): a batch task that ignores SIGTERM, so that after a forced drain it is
# still stopping (its kill_timeout) when the operator marks the node eligible again.
job "drain-batch" {
  type = "batch"

  group "work" {
    task "work" {
      driver       = "docker"
      kill_timeout = "20s"

      config {
        image   = "busybox:1.36"
        command = "sh"
        args    = ["-c", "trap '' TERM; sleep 300"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
