# ports referenced through NOMAD_* variables in env and args.
job "port-vars" {
  group "g" {
    network {
      port "http" {}
      port "grpc" {}
    }

    task "app" {
      driver = "exec"

      config {
        command = "/usr/local/bin/app"
        args    = ["--http", "${NOMAD_ADDR_http}", "--grpc", ":${NOMAD_PORT_grpc}"]
      }

      env {
        PUBLIC_HTTP = "${NOMAD_HOST_ADDR_http}"
        GRPC_PORT   = "${NOMAD_PORT_grpc}"
      }
    }
  }
}
