# docker: volumes (relative to the task dir) and mount blocks of each type.
job "docker-mounts" {
  group "g" {
    task "app" {
      driver = "docker"

      config {
        image   = "example/app:1.0"
        volumes = [
          "local/app.conf:/etc/app/app.conf",
          "secrets/token:/run/secrets/token:ro",
        ]

        mount {
          type     = "bind"
          target   = "/etc/ssl/certs"
          source   = "/etc/ssl/certs"
          readonly = true
          bind_options {
            propagation = "rshared"
          }
        }

        mount {
          type   = "volume"
          target = "/data"
          source = "app-data"
          volume_options {
            no_copy = false
            labels {
              app = "example"
            }
            driver_config {
              name = "local"
            }
          }
        }

        mount {
          type   = "tmpfs"
          target = "/scratch"
          tmpfs_options {
            size = 100000
            mode = 1777
          }
        }
      }
    }
  }
}
