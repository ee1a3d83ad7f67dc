# ephemeral_disk with sticky and migrate.
job "ephemeral" {
  group "cache" {
    ephemeral_disk {
      migrate = true
      size    = 500
      sticky  = true
    }

    task "redis" {
      driver = "docker"

      config {
        image = "redis:7"
        args  = ["--dir", "/alloc/data"]
      }
    }
  }
}
