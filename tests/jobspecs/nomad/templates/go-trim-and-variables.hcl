# Go template: trim markers, variable declaration and assignment, comments, pipelines.
job "tpl-go-trim" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      template {
        data        = <<-EOT
          {{- /* a comment that leaves no trace */ -}}
          {{- $count := 0 -}}
          {{- range service "web" -}}
            {{- $count = add $count 1 -}}
          {{- end -}}
          web_instances={{ $count }}
          {{ $name := env "NOMAD_TASK_NAME" | toUpper -}}
          TASK={{ $name }}
          {{- with $x := "scoped" }} {{ $x }}{{ end }}
        EOT
        destination = "local/vars.env"
      }

    }
  }
}
