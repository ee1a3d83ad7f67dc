# Grafana with its admin password and datasource from Vault and Consul through templates.
job "grafana" {
  group "grafana" {
    network {
      port "http" {
        to = 3000
      }
    }

    task "grafana" {
      driver = "docker"

      config {
        image = "grafana/grafana:11.0.0"
        ports = ["http"]
        volumes = ["local/datasources:/etc/grafana/provisioning/datasources"]
      }

      vault {
        role = "grafana"
      }

      template {
        data        = <<-EOT
          GF_SECURITY_ADMIN_USER=admin
          GF_SECURITY_ADMIN_PASSWORD={{ with secret "kv/data/grafana" }}{{ .Data.data.admin_password }}{{ end }}
        EOT
        destination = "secrets/grafana.env"
        env         = true
      }

      template {
        data        = <<-EOT
          apiVersion: 1
          datasources:
          {{- range service "prometheus" }}
            - name: Prometheus
              type: prometheus
              access: proxy
              url: http://{{ .Address }}:{{ .Port }}
          {{- end }}
        EOT
        destination = "local/datasources/prometheus.yaml"
      }

      service {
        name = "grafana"
        port = "http"

        check {
          type     = "http"
          path     = "/api/health"
          interval = "10s"
          timeout  = "2s"
        }
      }
    }
  }
}
