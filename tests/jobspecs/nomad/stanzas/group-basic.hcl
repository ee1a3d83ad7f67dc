# The group block: count, shutdown_delay, stop_after_client_disconnect and group meta.
job "group-docs" {
  group "cache" {
    count          = 3
    shutdown_delay = "5s"

    meta {
      tier = "cache"
    }

    network {
      port "db" {
        to = 6379
      }
    }

    task "redis" {
      driver = "docker"

      config {
        image = "redis:7"
        ports = ["db"]
      }

      resources {
        cpu    = 500
        memory = 256
      }
    }
  }
}
