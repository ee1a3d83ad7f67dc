# restart: modes, and render_templates on restart (Nomad 1.6).
job "restart-docs" {
  group "web" {
    restart {
      attempts         = 2
      interval         = "30m"
      delay            = "15s"
      mode             = "delay"
      render_templates = true
    }

    task "web" {
      driver = "docker"

      config {
        image = "nginx:1.27"
      }

      restart {
        attempts = 5
        delay    = "5s"
      }
    }
  }
}
