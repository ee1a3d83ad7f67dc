# A mesh gateway for cluster peering / WAN federation.
job "mesh-gateway" {
  group "gateway" {
    network {
      mode = "bridge"

      port "mesh_wan" {
        static = 9100
      }
    }

    service {
      name = "mesh-gateway"
      port = "mesh_wan"

      connect {
        gateway {
          mesh {}
        }
      }
    }
  }
}
