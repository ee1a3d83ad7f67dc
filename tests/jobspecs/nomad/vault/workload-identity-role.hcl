# vault with workload identity: cluster and role, the Vault token not written to a file.
job "vault-wi" {
  group "g" {
    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      vault {
        cluster      = "default"
        role         = "prod"
        disable_file = true
        env          = false
        change_mode  = "noop"
      }

      template {
        data        = "{{ with secret \"kv/data/prod/app\" }}{{ .Data.data.token }}{{ end }}"
        destination = "secrets/token"
      }
    }
  }
}
