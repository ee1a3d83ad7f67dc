# After hashicorp/nomad#27305 ("client: Fix task env calculation of alloc addr using static ports"):
# a bridge-mode group with a static port and no `to`; the task hands NOMAD_ALLOC_ADDR_http to its
# peers (here: writes it to the alloc's shared dir, as a sidecar or a config file would read it).
job "static-addr" {
  group "web" {
    network {
      mode = "bridge"

      port "http" {
        static = 28080
      }
    }

    task "server" {
      driver = "docker"

      config {
        image   = "busybox:1.36"
        command = "sh"
        args    = ["-c", "echo \"$NOMAD_ALLOC_ADDR_http\" > /alloc/addr.txt; exec httpd -f -p 28080"]
        ports   = ["http"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
