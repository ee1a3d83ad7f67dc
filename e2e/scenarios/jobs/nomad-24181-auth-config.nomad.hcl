# After hashicorp/nomad#24181 ("Docker auth.config not working anymore in 1.9.0"): a task whose image
# lives in a registry that asks for credentials, which the client holds in the docker plugin's
# auth { config } file (the lab: its registry's htpasswd user in /etc/fieldlab/registry-auth.json).
job "kafka-connect" {
  group "connect" {
    restart {
      attempts = 0
      mode     = "fail"
    }

    task "app" {
      driver = "docker"

      config {
        image = "oci.ehtrace.local/kafka-connect:3.8.0-45.0.0-SNAPSHOT-1"
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
