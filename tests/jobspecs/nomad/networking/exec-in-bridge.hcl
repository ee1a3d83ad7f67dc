# an exec task and a docker task sharing a bridge network namespace.
job "shared-netns" {
  group "g" {
    network {
      mode = "bridge"

      port "http" {
        to = 8000
      }
    }

    task "server" {
      driver = "exec"

      config {
        command = "/usr/bin/python3"
        args    = ["-m", "http.server", "8000"]
      }
    }

    task "client" {
      driver = "docker"

      config {
        image = "curlimages/curl:8.8.0"
        args  = ["sh", "-c", "while sleep 5; do curl -s localhost:8000 >/dev/null && echo ok; done"]
      }
    }
  }
}
