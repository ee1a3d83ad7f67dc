# docker: command with args, the pattern of `nomad job init`.
job "docker-command" {
  type = "batch"

  group "g" {
    task "hello" {
      driver = "docker"

      config {
        image   = "busybox:1.36"
        command = "sh"
        args    = ["-c", "echo hello; sleep 5"]
      }
    }
  }
}
