# A system job running node_exporter on every client, host networking.
job "node-exporter" {
  type     = "system"
  priority = 80

  update {
    max_parallel = 1
    stagger      = "10s"
  }

  group "exporter" {
    network {
      port "metrics" {
        static = 9100
      }
    }

    service {
      name     = "node-exporter"
      port     = "metrics"
      provider = "nomad"
    }

    task "node-exporter" {
      driver = "docker"

      config {
        image        = "prom/node-exporter:v1.8.1"
        network_mode = "host"
        pid_mode     = "host"
        args         = ["--path.rootfs=/host"]
        volumes      = ["/:/host:ro,rslave"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
