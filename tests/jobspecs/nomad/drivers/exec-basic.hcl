# exec: a binary from the host chroot, with args interpolating the environment.
job "exec-basic" {
  group "g" {
    network {
      port "http" {}
    }

    task "server" {
      driver = "exec"

      config {
        command = "/usr/bin/python3"
        args    = ["-m", "http.server", "${NOMAD_PORT_http}", "--directory", "local"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
