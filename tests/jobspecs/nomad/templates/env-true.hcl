# template: env = true turns the rendered KEY=value lines into task environment.
job "tpl-env-file" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      template {
        data        = <<-EOT
          LOG_LEVEL={{ keyOrDefault "app/log_level" "info" }}
          UPSTREAM={{ range $i, $s := service "api" }}{{ if eq $i 0 }}{{ $s.Address }}:{{ $s.Port }}{{ end }}{{ end }}
        EOT
        destination = "local/app.env"
        env         = true
        change_mode = "restart"
      }

    }
  }
}
