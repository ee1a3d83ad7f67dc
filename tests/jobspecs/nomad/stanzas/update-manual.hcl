# update with health_check = "manual" and max_parallel = 0 (no rolling updates).
job "manual-update" {
  group "db" {
    update {
      max_parallel = 0
      health_check = "manual"
    }

    task "db" {
      driver = "docker"

      config {
        image = "mariadb:11"
      }
    }
  }
}
