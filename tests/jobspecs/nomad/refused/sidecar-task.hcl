# sidecar_task: overriding the Envoy task Nomad injects for a Connect service.
job "sidecar-task-docs" {
  group "api" {
    network {
      mode = "bridge"
    }

    service {
      name = "api"
      port = "9001"

      connect {
        sidecar_service {}

        sidecar_task {
          name        = "envoy"
          driver      = "docker"
          kill_timeout = "10s"
          shutdown_delay = "5s"

          config {
            image = "envoyproxy/envoy:v1.29.2"
            args  = ["-c", "${NOMAD_SECRETS_DIR}/envoy_bootstrap.json", "-l", "${meta.connect.log_level}"]
          }

          logs {
            max_files     = 2
            max_file_size = 2
          }

          resources {
            cpu    = 100
            memory = 64
          }
        }
      }
    }

    task "api" {
      driver = "docker"

      config {
        image = "hashicorpdev/counter-api:v3"
      }
    }
  }
}
