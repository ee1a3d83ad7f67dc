# A terminating gateway for a service outside the mesh.
job "terminating-demo" {
  group "gateway" {
    network {
      mode = "bridge"
    }

    service {
      name = "api-gateway"

      connect {
        gateway {
          proxy {}

          terminating {
            service {
              name      = "legacy-db"
              ca_file   = "/etc/certs/ca-chain.cert.pem"
              cert_file = "/etc/certs/gateway.service.cert.pem"
              key_file  = "/etc/certs/gateway.service.key.pem"
              sni       = "db.example.com"
            }
          }
        }
      }
    }
  }
}
