# check fields: on_update, notes, interval/timeout, and a check_restart per check.
job "check-fields" {
  group "g" {
    network {
      port "http" {}
    }

    service {
      name = "api"
      port = "http"
      on_update = "require_healthy"

      check {
        name      = "ready"
        type      = "http"
        path      = "/ready"
        interval  = "15s"
        timeout   = "3s"
        on_update = "ignore"
        notes     = "readiness is allowed to fail during warm-up"
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
