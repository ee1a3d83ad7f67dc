# dynamic "group": one group per entry of a map variable.
variable "workers" {
  type = map(object({
    count = number
    queue = string
  }))
  default = {
    fast = { count = 3, queue = "priority" }
    slow = { count = 1, queue = "bulk" }
  }
}

job "dyn-groups" {
  dynamic "group" {
    for_each = var.workers
    labels   = ["worker-${group.key}"]

    content {
      count = group.value.count

      task "worker" {
        driver = "docker"

        config {
          image = "example/worker:1.0"
          args  = ["--queue", group.value.queue]
        }
      }
    }
  }
}
