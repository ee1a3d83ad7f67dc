# After hashicorp/nomad#26699 ("client: set network status on tasks when restoring allocations"):
# a bridge-mode task that reads its alloc's address from NOMAD_ALLOC_IP at each start (as a
# service announcing itself would), restarted after the Nomad agent was restarted.
job "announcer" {
  group "app" {
    network {
      mode = "bridge"

      port "http" {
        to = 8080
      }
    }

    restart {
      attempts = 3
      delay    = "2s"
      mode     = "fail"
    }

    task "app" {
      driver = "docker"

      config {
        image   = "busybox:1.36"
        command = "sh"
        args    = ["-c", "echo \"ip=$NOMAD_ALLOC_IP addr=$NOMAD_ALLOC_ADDR_http\" >> /alloc/announced.txt; exec httpd -f -p 8080"]
        ports   = ["http"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
