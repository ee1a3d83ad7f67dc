# A Consul ACL token issued by Vault's consul secrets engine, with a task identity.
job "consul-token" {
  group "g" {
    task "app" {
      driver = "exec"

      config {
        command = "/usr/local/bin/app"
      }

      identity {
        name = "vault_default"
        aud  = ["vault.io"]
      }

      vault {
        role = "app"
      }

      template {
        data        = "CONSUL_HTTP_TOKEN={{ with secret \"consul/creds/app\" }}{{ .Data.token }}{{ end }}"
        destination = "secrets/consul.env"
        env         = true
      }
    }
  }
}
