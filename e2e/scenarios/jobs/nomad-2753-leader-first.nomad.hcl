# After hashicorp/nomad#2753 ("client: Shutdown task group leader before other tasks", 0.6.0): a
# leader that flushes its work to a log shipper beside it when it is told to stop; the shipper must
# still be there while the leader drains.
job "flush" {
  group "app" {
    task "leader" {
      leader = true
      driver = "docker"

      config {
        image   = "busybox:1.26"
        command = "sh"
        args    = ["-c", "trap 'echo leader-term >> /alloc/order.txt; sleep 2; echo leader-flushed >> /alloc/order.txt; exit 0' TERM; while true; do sleep 1; done"]
      }
    }

    task "shipper" {
      driver = "docker"

      config {
        image   = "busybox:1.26"
        command = "sh"
        args    = ["-c", "trap 'echo shipper-term >> /alloc/order.txt; exit 0' TERM; while true; do sleep 1; done"]
      }
    }
  }
}
