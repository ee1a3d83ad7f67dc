# template: contains, containsAll, containsAny, containsNone, containsNotAll on service tags.
job "tpl-contains" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      template {
        data        = <<-EOT
          {{ range service "web" }}
          {{ if .Tags | contains "primary" }}primary {{ .Address }}{{ end }}
          {{ if .Tags | containsAny (split "," "blue,green") }}colored {{ .Address }}{{ end }}
          {{ if .Tags | containsAll (split "," "http,v2") }}v2 {{ .Address }}{{ end }}
          {{ if .Tags | containsNone (split "," "drain,maint") }}active {{ .Address }}{{ end }}
          {{ if .Tags | containsNotAll (split "," "a,b") }}partial {{ .Address }}{{ end }}
          {{ end }}
        EOT
        destination = "local/tags.txt"
      }

    }
  }
}
