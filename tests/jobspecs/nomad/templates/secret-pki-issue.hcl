# template: PKI issue with parameters; cert, key and CA rendered from one issue.
job "tpl-pki" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      vault {
        policies = ["app-read"]
      }

      template {
        data        = <<-EOT
          {{ with secret "pki/issue/app" "common_name=app.service.consul" "ttl=24h" "alt_names=localhost" "ip_sans=127.0.0.1" }}
          {{- .Data.certificate -}}
          {{ end }}
        EOT
        destination   = "secrets/cert.pem"
        change_mode   = "signal"
        change_signal = "SIGHUP"
      }

      template {
        data        = <<-EOT
          {{ with secret "pki/issue/app" "common_name=app.service.consul" "ttl=24h" "alt_names=localhost" "ip_sans=127.0.0.1" }}
          {{- .Data.private_key -}}
          {{ end }}
        EOT
        destination = "secrets/key.pem"
        perms       = "0600"
        change_mode = "noop"
      }

      template {
        data        = <<-EOT
          {{ with secret "pki/issue/app" "common_name=app.service.consul" "ttl=24h" "alt_names=localhost" "ip_sans=127.0.0.1" }}
          {{- range .Data.ca_chain }}{{ . }}
          {{ end }}{{ .Data.issuing_ca }}
          {{ end }}
        EOT
        destination = "secrets/ca.pem"
      }

    }
  }
}
