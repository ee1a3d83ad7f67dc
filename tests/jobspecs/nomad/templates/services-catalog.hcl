# template: services lists the catalog; byTag groups service entries by tag.
job "tpl-services" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      template {
        data        = <<-EOT
          {{ range services }}
          # {{ .Name }}: {{ join "," .Tags }}
          {{ end }}

          {{ range $tag, $services := service "web" | byTag }}
          [{{ $tag }}]
          {{ range $services }}{{ .Address }}:{{ .Port }}
          {{ end }}
          {{ end }}
        EOT
        destination = "local/catalog.txt"
      }

    }
  }
}
