# check_restart at the service level applies to every check of the service.
job "check-restart" {
  group "web" {
    network {
      port "http" {
        to = 80
      }
    }

    task "nginx" {
      driver = "docker"

      config {
        image = "nginx:1.27"
        ports = ["http"]
      }

      service {
        name = "web"
        port = "http"

        check_restart {
          limit = 2
          grace = "30s"
        }

        check {
          type     = "http"
          path     = "/"
          interval = "10s"
          timeout  = "2s"
        }

        check {
          type     = "tcp"
          interval = "10s"
          timeout  = "2s"
          check_restart {
            limit           = 5
            ignore_warnings = true
          }
        }
      }
    }
  }
}
