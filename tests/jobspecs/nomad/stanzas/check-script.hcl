# script check run inside the task, with on_update and check_restart.
job "check-script" {
  group "db" {
    network {
      port "pg" {
        to = 5432
      }
    }

    task "postgres" {
      driver = "docker"

      config {
        image = "postgres:16"
        ports = ["pg"]
      }

      env {
        POSTGRES_PASSWORD = "example"
      }

      service {
        name = "postgres"
        port = "pg"

        check {
          name      = "pg_isready"
          type      = "script"
          command   = "/usr/bin/pg_isready"
          args      = ["-U", "postgres"]
          interval  = "30s"
          timeout   = "5s"
          on_update = "ignore_warnings"

          check_restart {
            limit           = 3
            grace           = "90s"
            ignore_warnings = true
          }
        }
      }
    }
  }
}
