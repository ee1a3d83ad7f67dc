# Fabio load balancer as a system job with Consul routing via urlprefix- tags.
job "fabio" {
  type = "system"

  group "fabio" {
    network {
      port "lb" {
        static = 9999
      }

      port "ui" {
        static = 9998
      }
    }

    task "fabio" {
      driver = "docker"

      config {
        image        = "fabiolb/fabio"
        network_mode = "host"
        ports        = ["lb", "ui"]
      }

      resources {
        cpu    = 200
        memory = 128
      }
    }
  }
}
