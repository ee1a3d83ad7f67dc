# Consul service weights and an explicit Consul cluster (Enterprise).
job "weights" {
  group "g" {
    network {
      port "http" {}
    }

    service {
      name    = "api"
      port    = "http"
      cluster = "default"

      weights {
        passing = 10
        warning = 1
      }
    }

    task "api" {
      driver = "docker"

      config {
        image = "example/api:2.1"
        ports = ["http"]
      }
    }
  }
}
