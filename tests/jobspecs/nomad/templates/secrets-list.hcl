# template: secrets lists the keys under a path; each is read with secret.
job "tpl-secrets" {
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
          {{ range secrets "secret/myapp/" }}
          {{ . }}={{ with secret (printf "secret/myapp/%s" .) }}{{ .Data.value }}{{ end }}
          {{ end }}
        EOT
        destination = "secrets/all.env"
        env         = true
      }

    }
  }
}
