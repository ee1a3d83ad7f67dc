# template: byMeta groups services by a meta key; service health filters.
job "tpl-bymeta" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      template {
        data        = <<-EOT
          {{ range $zone, $svcs := service "api|any" | byMeta "zone" }}
          [{{ $zone }}]
          {{ range $svcs }}{{ .Address }}:{{ .Port }} {{ .Status }}
          {{ end }}
          {{ end }}
        EOT
        destination = "local/zones.txt"
      }

    }
  }
}
