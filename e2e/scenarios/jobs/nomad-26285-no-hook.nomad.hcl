# After hashicorp/nomad#26285 ("jobspec: Validate required hook field in lifecycle block"): a
# sidecar whose lifecycle block sets `sidecar` but forgets the `hook` it needs.
job "fronted-nohook" {
  group "web" {
    task "proxy" {
      lifecycle {
        sidecar = true
      }

      driver = "docker"

      config {
        image   = "alpine:3.18"
        command = "sh"
        args    = ["-c", "while true; do sleep 1; done"]
      }
    }

    task "app" {
      driver = "docker"

      config {
        image   = "alpine:3.18"
        command = "sh"
        args    = ["-c", "while true; do sleep 1; done"]
      }
    }
  }
}
