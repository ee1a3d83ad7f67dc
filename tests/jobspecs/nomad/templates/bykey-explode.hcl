# template: byKey groups a KV tree by its top-level key; explode builds a nested map.
job "tpl-bykey" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      template {
        data        = <<-EOT
          {{ range $key, $pairs := tree "groups" | byKey }}
          [{{ $key }}]
          {{ range $pair := $pairs }}{{ .Key }} = {{ .Value }}
          {{ end }}
          {{ end }}

          {{ with tree "config" | explode }}
          {{ with .database }}host = {{ .host }}{{ end }}
          {{ end }}
        EOT
        destination = "local/groups.ini"
      }

    }
  }
}
