# address_mode = "driver": advertise the container's address; check on the host.
job "driver-address" {
  group "g" {
    network {
      port "http" {
        to = 8080
      }
    }

    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
        ports = ["http"]
      }

      service {
        name         = "app"
        port         = "http"
        address_mode = "driver"

        check {
          type         = "http"
          port         = "http"
          path         = "/health"
          address_mode = "host"
          interval     = "10s"
          timeout      = "2s"
        }
      }
    }
  }
}
