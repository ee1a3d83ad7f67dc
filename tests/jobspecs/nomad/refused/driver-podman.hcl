# The podman task driver plugin: not a driver fieldlab-agent runs.
job "podman-redis" {
  group "cache" {
    network {
      port "db" {
        to = 6379
      }
    }

    task "redis" {
      driver = "podman"

      config {
        image = "docker.io/library/redis:7"
        ports = ["db"]
      }
    }
  }
}
