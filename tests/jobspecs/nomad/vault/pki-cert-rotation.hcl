# A TLS server whose certificate comes from Vault PKI and is reloaded on renewal.
job "tls-server" {
  group "web" {
    network {
      port "https" {
        to = 8443
      }
    }

    task "server" {
      driver = "docker"

      config {
        image = "nginx:1.27"
        ports = ["https"]
        volumes = ["secrets:/etc/nginx/tls:ro"]
      }

      vault {
        role = "tls-server"
      }

      template {
        data        = <<-EOT
          {{ with secret "pki_int/issue/web" "common_name=web.example.com" "ttl=72h" }}
          {{ .Data.certificate }}
          {{ .Data.issuing_ca }}
          {{ end }}
        EOT
        destination   = "secrets/bundle.pem"
        change_mode   = "signal"
        change_signal = "SIGHUP"
        splay         = "1m"
      }

      template {
        data        = "{{ with secret \"pki_int/issue/web\" \"common_name=web.example.com\" \"ttl=72h\" }}{{ .Data.private_key }}{{ end }}"
        destination = "secrets/key.pem"
        perms       = "0600"
      }
    }
  }
}
