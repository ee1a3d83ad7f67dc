# After hashicorp/nomad#9841 ("Nomad prestart task breaks alloc restart"): a service whose prestart
# task prepares a file in the shared alloc dir and exits; the operator then restarts the alloc.
job "test" {
  group "test" {
    task "prepare" {
      lifecycle {
        hook    = "prestart"
        sidecar = false
      }

      driver = "docker"

      config {
        image   = "busybox:1.32"
        command = "sh"
        args    = ["-c", "echo ready > /alloc/ready"]
      }
    }

    task "main" {
      driver = "docker"

      config {
        image   = "busybox:1.32"
        command = "sh"
        args    = ["-c", "cat /alloc/ready; while true; do sleep 1; done"]
      }
    }
  }
}
