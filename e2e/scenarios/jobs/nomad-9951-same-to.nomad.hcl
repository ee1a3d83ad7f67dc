# After hashicorp/nomad#9951 ("drivers/docker: Fixed a bug preventing multiple ports to be mapped to
# the same container port", 1.0.4): a web server reached on two host ports (a public one and one for
# the internal load balancer), both forwarded to the port it listens on.
job "two-doors" {
  group "web" {
    network {
      mode = "bridge"
      port "public" {
        to = 8080
      }
      port "internal" {
        to = 8080
      }
    }

    task "web" {
      driver = "docker"

      config {
        image = "hashicorp/http-echo:0.2.3"
        args  = ["-listen", ":8080", "-text", "hello"]
        ports = ["public", "internal"]
      }
    }
  }
}
