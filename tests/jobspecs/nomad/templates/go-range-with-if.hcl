# Go template control: range with else, with/else, if/else if, and, or, not, eq, ne, lt, le, gt, ge, len, index.
job "tpl-go-control" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      template {
        data        = <<-EOT
          {{ $svcs := service "db" }}
          {{ if eq (len $svcs) 0 }}no database
          {{ else if gt (len $svcs) 2 }}cluster of {{ len $svcs }}
          {{ else }}single: {{ (index $svcs 0).Address }}
          {{ end }}
          {{ with key "app/mode" }}mode={{ . }}{{ else }}mode=default{{ end }}
          {{ if and (ne (env "NOMAD_ALLOC_INDEX") "0") (not (keyExists "app/paused")) }}follower{{ end }}
          {{ if or (lt 1 2) (le 2 2) (ge 3 1) }}math ok{{ end }}
          {{ range $i, $s := $svcs }}{{ if $i }},{{ end }}{{ $s.Address }}{{ else }}none{{ end }}
        EOT
        destination = "local/control.txt"
      }

    }
  }
}
