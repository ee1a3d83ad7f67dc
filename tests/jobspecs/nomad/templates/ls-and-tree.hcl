# template: ls (top level) and tree (recursive) over a KV prefix.
job "tpl-ls-tree" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      template {
        data        = <<-EOT
          [settings]
          {{ range ls "service/app/settings" }}
          {{ .Key }} = {{ .Value }}
          {{ end }}

          [all]
          {{ range tree "service/app" }}
          # {{ .Path }}
          {{ .Key }} = {{ .Value }}
          {{ end }}
        EOT
        destination = "local/app.ini"
      }

    }
  }
}
