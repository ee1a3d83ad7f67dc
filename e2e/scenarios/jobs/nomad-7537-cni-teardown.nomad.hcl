# After hashicorp/nomad#7537 (fixed by PR 7643, "ar/bridge_networking: ensure cni configuration is
# loaded"): a service on a CNI network with a port mapped by portmap (here the lab's second bridge
# conflist, lab-bridge2), on a client restarted while it runs and stopped after the client came back.
# Its CNI DEL must run, so that its address, its portmap and firewall chains and its kept ADD result go
# with it.
job "cni-teardown" {
  group "web" {
    network {
      mode = "cni/lab-bridge2"

      port "http" {
        to = 80
      }
    }

    task "httpd" {
      driver = "docker"

      config {
        image   = "busybox:1.36"
        command = "httpd"
        args    = ["-f", "-p", "80"]
        ports   = ["http"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
