# After hashicorp/nomad#8153 ("Docker: memory_hard_limit conflict with MemorySwap"): a docker task
# with a soft memory reservation and a larger memory_hard_limit; it notes the limit it runs under.
job "hardlimit" {
  group "app" {
    restart {
      attempts = 0
      mode     = "fail"
    }

    task "app" {
      driver = "docker"

      config {
        image             = "busybox:1"
        command           = "sh"
        args              = ["-c", "cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory/memory.limit_in_bytes > /alloc/limit.txt 2>/dev/null; exec sleep 3600"]
        memory_hard_limit = 128
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
