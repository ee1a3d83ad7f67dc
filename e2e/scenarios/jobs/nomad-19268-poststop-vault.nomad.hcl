# After hashicorp/nomad#16886 ("Poststop lifecycle task - Can't request Vault token for terminal
# allocation", fixed by PR 19268): a service whose poststop task deregisters it somewhere and needs
# a Vault token to do so. The job is stopped; the poststop task reports whether it had a token.
job "cleanup" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image   = "alpine:3.18"
        command = "sh"
        args    = ["-c", "while true; do sleep 1; done"]
      }
    }

    task "deregister" {
      lifecycle {
        hook = "poststop"
      }

      driver = "docker"

      config {
        image   = "alpine:3.18"
        command = "sh"
        args    = ["-c", "if [ -s /secrets/vault_token ]; then echo token-present; else echo token-missing; fi"]
      }

      vault {
        policies = ["cleanup-kv"]
      }
    }
  }
}
