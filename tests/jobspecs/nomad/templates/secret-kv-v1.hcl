# template: secret from a KV version 1 engine (fields under .Data).
job "tpl-kv-v1" {
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
          {{ with secret "secret/myapp/config" }}
          DB_USER={{ .Data.username }}
          DB_PASS={{ .Data.password }}
          {{ end }}
        EOT
        destination = "secrets/db.env"
        env         = true
      }

    }
  }
}
