# Version 2 of nomad-13008-volume-v1.nomad.hcl: the same task, now with the client's host volume
# "scratch" mounted at /scratch. Nomad must replace the alloc for the mount to exist.
job "volumes" {
  group "app" {
    volume "scratch" {
      type   = "host"
      source = "scratch"
    }

    task "app" {
      driver = "docker"

      config {
        image   = "busybox:1.36"
        command = "sh"
        args    = ["-c", "exec sleep 3600"]
      }

      volume_mount {
        volume      = "scratch"
        destination = "/scratch"
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
