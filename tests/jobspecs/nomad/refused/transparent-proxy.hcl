# transparent_proxy (Nomad 1.8): upstreams reached through Consul DNS, no local bind ports.
job "tproxy" {
  group "api" {
    network {
      mode = "bridge"
    }

    service {
      name = "api"
      port = "9001"

      connect {
        sidecar_service {
          proxy {
            transparent_proxy {
              exclude_outbound_ports = [53, 8300]
              exclude_uids           = ["1001"]
              no_dns                 = false
            }
          }
        }
      }
    }

    task "api" {
      driver = "docker"

      config {
        image = "hashicorpdev/counter-api:v3"
      }
    }
  }
}
