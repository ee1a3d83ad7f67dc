# template: once = true renders a single time and never re-renders (Nomad 1.10).
job "tpl-once" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      vault {
        policies = ["app-read"]
      }

      template {
        data        = "bootstrap_token={{ with secret \"secret/app/bootstrap\" }}{{ .Data.token }}{{ end }}"
        destination = "secrets/bootstrap"
        once        = true
      }

    }
  }
}
