# template: secret from a KV version 2 engine (fields under .Data.data, metadata too).
job "tpl-kv-v2" {
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
          {{ with secret "kv/data/myapp/config" }}
          api_key = "{{ .Data.data.api_key }}"
          version = {{ .Data.metadata.version }}
          {{ end }}
          {{ with secret "kv/data/myapp/config?version=1" }}previous = "{{ .Data.data.api_key }}"{{ end }}
        EOT
        destination = "secrets/app.toml"
        change_mode = "restart"
      }

    }
  }
}
