# After hashicorp/nomad#9636 (template: trigger change_mode for dynamic secrets on restore): a task
# whose template renders a dynamic Vault secret (a PKI certificate, issued anew on every client
# start) with change_mode "signal", and a vault block naming the job's own policy.
job "dyn-secret" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = "redis:7"
      }

      vault {
        policies = ["dyn-secret-pki"]
      }

      template {
        data          = <<EOT
{{ with secret "pki_int/issue/fieldlab-workload" "common_name=dyn-secret.service.fieldlab" "ttl=1h" -}}
{{ .Data.serial_number }}{{ end }}
EOT
        destination   = "secrets/serial"
        change_mode   = "signal"
        change_signal = "SIGHUP"
      }
    }
  }
}
