# Workload identities for Vault and Consul, as the 1.7+ integrations read them.
job "wi-integrations" {
  group "app" {
    task "app" {
      driver = "exec"

      config {
        command = "/usr/local/bin/app"
      }

      identity {
        name = "vault_default"
        aud  = ["vault.io"]
        ttl  = "1h"
      }

      identity {
        name = "consul_default"
        aud  = ["consul.io"]
        ttl  = "1h"
      }

      vault {
        role = "app"
      }
    }
  }
}
