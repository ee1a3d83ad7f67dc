# host networking with a static port and a host_network selection.
job "static-port" {
  type = "system"

  group "lb" {
    network {
      port "http" {
        static       = 80
        host_network = "public"
      }

      port "admin" {
        static       = 9901
        host_network = "private"
      }
    }

    task "haproxy" {
      driver = "docker"

      config {
        image        = "haproxy:2.9"
        network_mode = "host"
      }
    }
  }
}
