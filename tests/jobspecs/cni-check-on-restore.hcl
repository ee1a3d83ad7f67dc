# From seeds/cni-check-on-restore.txt (nomad#24292 test job), as written apart from the image:
# nginx:latest -> the lab's busybox serving HTTP on port 80, with `init = true` so that a stop ends it
# at SIGTERM as it ends nginx (busybox as PID 1 ignores SIGTERM and would wait out the kill_timeout).
job "example" {

  group "nginx" {
    network {
      mode = "bridge"
      port "http" {
        to = 80
      }
    }

    task "nginx" {
      driver = "docker"

      config {
        image   = "fieldlab/busybox:lab"
        init    = true  # busybox as PID 1 ignores SIGTERM; the report's nginx ends on it
        command = "httpd"
        args    = ["-f", "-p", "80"]
        ports   = ["http"]
      }

      resources {
        cpu    = 500
        memory = 256
      }
    }
  }
}
