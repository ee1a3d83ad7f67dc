# Nested dynamic blocks: services, each with dynamic checks.
locals {
  services = {
    api = {
      port   = "http"
      checks = ["/health", "/ready"]
    }
    admin = {
      port   = "admin"
      checks = ["/ping"]
    }
  }
}

job "dyn-nested" {
  group "g" {
    network {
      port "http" {}
      port "admin" {}
    }

    dynamic "service" {
      for_each = local.services
      iterator = svc

      content {
        name = svc.key
        port = svc.value.port

        dynamic "check" {
          for_each = svc.value.checks

          content {
            type     = "http"
            path     = check.value
            interval = "10s"
            timeout  = "2s"
          }
        }
      }
    }

    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
        ports = ["http", "admin"]
      }
    }
  }
}
