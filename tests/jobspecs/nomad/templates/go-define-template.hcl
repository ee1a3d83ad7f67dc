# Go template: define and template for a reusable block, block, and printf with verbs.
job "tpl-go-define" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      template {
        data        = <<-EOT
          {{ define "upstream" }}server {{ .Address }}:{{ .Port }} max_fails=3;{{ end }}
          upstream web {
          {{ range service "web" }}  {{ template "upstream" . }}
          {{ end }}}
          {{ block "footer" . }}# default footer{{ end }}
          {{ printf "%-10s|%5d|%.2f|%q|%v" "name" 42 3.14159 "quoted" true }}
          {{ print "a" "b" }} {{ println "line" }}
        EOT
        destination = "local/nginx.conf"
      }

    }
  }
}
