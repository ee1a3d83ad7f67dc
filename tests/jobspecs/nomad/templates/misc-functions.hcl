# template: envOrDefault, trimPrefix, trimSuffix, indent, sha256Hex, md5sum, parseYAML, toTOML.
job "tpl-misc" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      template {
        data        = <<-EOT
          region = "{{ envOrDefault "REGION" "us-east-1" }}"
          path   = "{{ key "app/path" | trimPrefix "/" | trimSuffix "/" }}"
          hash   = "{{ key "app/password" | sha256Hex }}"
          md5    = "{{ key "app/password" | md5sum }}"
          {{ with key "app/yaml" | parseYAML }}
          {{ . | toTOML }}
          {{ end }}
          body:
          {{ key "app/body" | indent 4 }}
        EOT
        destination = "local/misc.toml"
      }

    }
  }
}
