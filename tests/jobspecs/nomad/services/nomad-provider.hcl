# Native Nomad service discovery: provider = "nomad" with http and tcp checks.
job "nomad-services" {
  group "cache" {
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

      service {
        name     = "redis"
        port     = "db"
        provider = "nomad"
        tags     = ["cache"]

        check {
          name     = "redis-tcp"
          type     = "tcp"
          interval = "10s"
          timeout  = "2s"
        }
      }
    }
  }
}
