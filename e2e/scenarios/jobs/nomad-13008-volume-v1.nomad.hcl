# After hashicorp/nomad#13008 ("volumes: Fixed a bug where additions, updates, or removals of host
# volumes or CSI volumes were not treated as destructive updates"): version 1 of a job, with no
# volume; version 2 (nomad-13008-volume-v2.nomad.hcl) mounts the client's host volume.
job "volumes" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image   = "busybox:1.36"
        command = "sh"
        args    = ["-c", "exec sleep 3600"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
