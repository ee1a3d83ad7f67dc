# template: executeTemplate of a defined template with data, and mustEnv.
job "tpl-mustenv" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      template {
        data        = <<-EOT
          {{ define "kv" }}{{ .Key }}={{ .Value }}{{ end }}
          {{ range ls "app/env" }}{{ executeTemplate "kv" . }}
          {{ end }}
          HOME_DIR={{ mustEnv "NOMAD_TASK_DIR" }}
        EOT
        destination = "local/kv.env"
      }

    }
  }
}
