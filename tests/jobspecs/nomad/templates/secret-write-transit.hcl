# template: a secret write with parameters (Transit encrypt) and a database credential.
job "tpl-transit" {
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
          {{ with secret "transit/encrypt/app" "plaintext=aGVsbG8gd29ybGQ=" }}{{ .Data.ciphertext }}{{ end }}
          {{ with secret "database/creds/readonly" }}
          user={{ .Data.username }}
          pass={{ .Data.password }}
          lease={{ .LeaseDuration }}
          {{ end }}
        EOT
        destination = "secrets/out.txt"
      }

    }
  }
}
