# docker: host devices, runtime, ipc/pid/uts modes and a tty.
job "docker-devices" {
  group "g" {
    task "app" {
      driver = "docker"

      config {
        image       = "example/video:5"
        runtime     = "runc"
        ipc_mode    = "host"
        pid_mode    = "host"
        uts_mode    = "host"
        tty         = true
        interactive = false

        devices = [
          {
            host_path      = "/dev/dri/renderD128"
            container_path = "/dev/dri/renderD128"
          },
          {
            host_path          = "/dev/fuse"
            cgroup_permissions = "rwm"
          },
        ]
      }
    }
  }
}
