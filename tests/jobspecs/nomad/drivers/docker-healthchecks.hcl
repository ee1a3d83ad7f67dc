# docker: disable the image's HEALTHCHECK, set a platform, isolation and container_exists_attempts.
job "docker-misc" {
  group "g" {
    task "app" {
      driver = "docker"

      config {
        image                     = "example/app:1.0"
        platform                  = "linux/amd64"
        container_exists_attempts = 10
        volume_driver             = "local"

        healthchecks {
          disable = true
        }
      }
    }
  }
}
