# secret blocks (Nomad 1.11): Vault and Nomad providers, referenced as ${secret.<name>.<key>}.
job "secret-docs" {
  group "example" {
    task "server" {
      driver = "docker"

      config {
        image = "example/api:2.1"
      }

      vault {}

      secret "db" {
        provider = "vault"
        path     = "secret/data/db"

        config {
          engine = "kv_v2"
        }
      }

      secret "flags" {
        provider = "nomad"
        path     = "nomad/jobs/secret-docs/flags"
      }

      env {
        DB_PASSWORD  = "${secret.db.password}"
        FEATURE_FLAG = "${secret.flags.beta}"
      }
    }
  }
}
