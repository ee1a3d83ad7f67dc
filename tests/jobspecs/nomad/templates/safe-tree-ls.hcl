# template: safeTree and safeLs refuse to render an empty prefix (no accidental wipe).
job "tpl-safe" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      template {
        data        = <<-EOT
          {{ range safeTree "config/haproxy" }}
          {{ .Key }} {{ .Value }}
          {{ end }}
          {{ range safeLs "config/flags" }}{{ .Key }}={{ .Value }}
          {{ end }}
        EOT
        destination = "local/haproxy.cfg"
      }

    }
  }
}
