# From seeds/pause-container-orphans.txt (nomad#12216, the reporter's job). The seed shows only the
# group, with names and values redacted; this completes it with a job block, lab names and a lab image
# (run under docker-init, `init = true`, so that it ends at SIGTERM as the reporter's app server would),
# and keeps its structure: kill_timeout, a docker registry `auth` block (not implemented by the agent:
# a warning), env, resources, a bridge network without ports after the task, a service without a port.
job "orphans" {
  group "app" {
    task "app" {
      driver = "docker"
      kill_timeout = "20s"
      config {
        image = "fieldlab/busybox:lab"
        init = true  # busybox as PID 1 ignores SIGTERM; the reporter's app server ends on it
        command = "httpd"
        args = ["-f", "-p", "8080"]
        auth {
          username = "fieldlab"
          password = "placeholder-not-a-secret"
        }
      }
      env {
          APP_MODE = "orphans"
      }
      resources {
        cpu    = 200
        memory = 300
      }
    }
    network {
      mode = "bridge"
    }
    service {
      name = "orphans-app"
    }
  }
}
