# proxy: local_service_address/port, config map and upstream options.
job "proxy-docs" {
  group "web" {
    network {
      mode = "bridge"
    }

    service {
      name = "web"
      port = "8080"

      connect {
        sidecar_service {
          tags = ["mesh"]
          port = "20000"

          proxy {
            local_service_address = "127.0.0.1"
            local_service_port    = 8080

            config {
              protocol             = "http"
              local_connect_timeout_ms = 2000
            }

            upstreams {
              destination_name      = "payments"
              destination_namespace = "default"
              local_bind_port       = 10000
              local_bind_address    = "127.0.0.1"
              datacenter            = "dc2"

              mesh_gateway {
                mode = "local"
              }
            }
          }
        }
      }
    }

    task "web" {
      driver = "docker"

      config {
        image = "example/web:1.0"
      }
    }
  }
}
