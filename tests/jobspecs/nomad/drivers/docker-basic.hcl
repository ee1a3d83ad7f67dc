# docker: image, command/args, entrypoint, work_dir, labels.
job "docker-basic" {
  group "g" {
    network {
      port "http" {
        to = 5678
      }
    }

    task "echo" {
      driver = "docker"

      config {
        image      = "hashicorp/http-echo:1.0"
        entrypoint = ["/http-echo"]
        args       = ["-listen", ":5678", "-text", "hi from ${NOMAD_ALLOC_NAME}"]
        work_dir   = "/tmp"
        ports      = ["http"]

        labels {
          group = "web"
          owner = "platform"
        }
      }
    }
  }
}
