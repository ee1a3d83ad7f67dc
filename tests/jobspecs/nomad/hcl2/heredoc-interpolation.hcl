# A heredoc mixing HCL interpolation (${var...}) and Go template actions ({{ }}).
variable "app_port" {
  type    = number
  default = 8080
}

job "heredoc-mix" {
  group "g" {
    task "t" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      template {
        data        = <<EOH
listen = ":${var.app_port}"
{{ range service "db" }}db = "{{ .Address }}:{{ .Port }}"
{{ end }}
home = "$${HOME}"
EOH
        destination = "local/app.toml"
      }
    }
  }
}
