# change_mode "script" for a restored task (nomad-15851/24051): a dynamic secret is issued anew on every
# agent start, so after a restart the re-rendered file differs from what the task loaded and the change
# script is owed. The script appends a line to local/script-runs (a host-visible bind mount), so the
# test counts its runs from outside the task.
job "script-restore" {
  group "g" {
    task "web" {
      driver = "docker"

      config {
        image   = "fieldlab/busybox:lab"
        command = "sleep"
        args    = ["600"]
      }

      # The task's own Vault token: the template issues its cert with it (s.service.fieldlab).
      vault {
        policies = ["fieldlab-job-probe"]
      }

      template {
        data        = <<-EOT
          {{ with secret "pki_int/issue/fieldlab-workload" "common_name=s.service.fieldlab" }}{{ .Data.serial_number }}{{ end }}
        EOT
        destination = "secrets/serial"
        change_mode = "script"
        change_script {
          command = "/bin/sh"
          args    = ["-c", "echo ran >> /local/script-runs"]
          timeout = "10s"
        }
        splay = "0s"
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
