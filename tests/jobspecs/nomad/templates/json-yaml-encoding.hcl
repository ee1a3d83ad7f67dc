# template: toJSON, toJSONPretty and toYAML over KV trees and service lists.
job "tpl-encoding" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      template {
        data        = <<-EOT
          {{ tree "config/app" | explode | toJSONPretty }}
        EOT
        destination = "local/config.json"
      }

      template {
        data        = <<-EOT
          {{ tree "config/app" | explode | toYAML }}
        EOT
        destination = "local/config.yaml"
      }

      template {
        data        = "{{ service \"web\" | toJSON }}"
        destination = "local/web.json"
      }

    }
  }
}
