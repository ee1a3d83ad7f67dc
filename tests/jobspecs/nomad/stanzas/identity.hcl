# identity: the default workload identity exposed as env and file, and a named one for OIDC.
job "identity-docs" {
  group "example" {
    task "api" {
      driver = "docker"

      config {
        image = "example/api:2.1"
      }

      identity {
        env         = true
        file        = true
        filepath    = "local/example.jwt"
        change_mode = "restart"
      }

      identity {
        name          = "example"
        aud           = ["oidc.example.com"]
        file          = true
        ttl           = "1h"
        change_mode   = "signal"
        change_signal = "SIGHUP"
      }
    }
  }
}
