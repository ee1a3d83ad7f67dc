# An exec task in bridge mode: a plain process (busybox httpd) in a netns the agent creates and the
# task joins by path; its port mapped through portmap.
job "exec-web" {
  group "web" {
    network {
      mode = "bridge"
      port "http" {
        to = 8080
      }
    }

    task "httpd" {
      driver = "exec"

      config {
        command = "/bin/busybox"
        args    = ["httpd", "-f", "-p", "8080", "-h", "local"]
      }

      template {
        data        = "exec says hello"
        destination = "local/index.html"
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
