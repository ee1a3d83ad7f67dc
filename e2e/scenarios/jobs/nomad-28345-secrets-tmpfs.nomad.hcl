# After hashicorp/nomad#28345 ("client: Remount alloc tmpfs on client and alloc recovery"): a task
# whose secrets/ must be memory-backed (Nomad mounts a tmpfs there: tokens and rendered secrets
# never touch the disk). The task notes, at each start, what backs /secrets.
job "secret-keeper" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image   = "alpine:3.20"
        command = "sh"
        args    = ["-c", "stat -f -c %T /secrets >> /alloc/secrets-fs.txt; exec sleep 3600"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
