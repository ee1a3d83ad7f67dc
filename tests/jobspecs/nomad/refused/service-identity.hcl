# A service with its own workload identity for Consul.
job "svc-identity" {
  group "g" {
    network {
      port "http" {}
    }

    service {
      name = "api"
      port = "http"

      identity {
        aud = ["consul.io"]
        ttl = "1h"
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
