# After hashicorp/nomad#13055 ("alloc_runner: stop sidecar tasks last"): a service fronted by a
# prestart sidecar proxy. At the stop the service drains (2 s) and the proxy must still be there
# while it does; each task notes when its signal came and when it was done.
job "fronted" {
  group "web" {
    task "proxy" {
      lifecycle {
        hook    = "prestart"
        sidecar = true
      }

      driver = "docker"

      config {
        image   = "envoyproxy/envoy:v1.22.2"
        command = "sh"
        args    = ["-c", "trap 'echo proxy-term >> /alloc/order.txt; exit 0' TERM; while true; do sleep 1; done"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }

    task "app" {
      driver = "docker"

      config {
        image   = "busybox:1.36"
        command = "sh"
        args    = ["-c", "trap 'echo app-term >> /alloc/order.txt; sleep 2; echo app-drained >> /alloc/order.txt; exit 0' TERM; while true; do sleep 1; done"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
