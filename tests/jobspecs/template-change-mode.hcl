# For seeds/template-change-mode-after-restart.txt (nomad#24140). The seed has no jobspec; this is the
# workload it describes: a certificate issued by Vault's PKI through a template, re-issued on each agent
# restart, whose change_mode must fire exactly once per change. busybox stands in for the probe workload
# (which reports the signals it received and the certificate it has loaded) until that image exists.
job "pki-probe" {
  type = "service"

  meta {
    seed = "nomad-24140"
  }

  group "probe" {
    count = 1

    network {
      mode = "bridge"
      port "https" {
        to = 8443
      }
    }

    restart {
      attempts = 3
      interval = "5m"
      delay    = "10s"
      mode     = "fail"
    }

    task "probe" {
      driver = "docker"

      config {
        image   = "fieldlab/busybox:lab"
        command = "httpd"
        args    = ["-f", "-p", "8443", "-h", "/local"]
        ports   = ["https"]
      }

      vault {
        policies = ["fieldlab-job-probe"]
        role     = "fieldlab-workload"
      }

      env {
        PROBE_ALLOC = "${NOMAD_ALLOC_ID}"
      }

      kill_timeout = "1m30s"
      kill_signal  = "SIGINT"

      template {
        data        = <<-EOT
          {{ with secret "pki_int/issue/workload" "common_name=probe.service.consul" "ttl=2m" }}
          {{ .Data.certificate }}
          {{ end }}
        EOT
        destination = "secrets/cert.pem"
        perms       = "600"
        change_mode = "signal"
        change_signal = "SIGHUP"
        splay       = "250ms"
        wait {
          min = "2s"
          max = "10s"
        }
      }

      template {
        data        = "{{ with secret \"pki_int/issue/workload\" \"common_name=probe.service.consul\" }}{{ .Data.private_key }}{{ end }}"
        destination = "${NOMAD_SECRETS_DIR}/key.pem"
        change_mode = "restart"
        error_on_missing_key = true
      }

      template {
        data        = "$${not_interpolated} serial={{ key \"fieldlab/serial\" }}\n"
        destination = "local/serial.txt"
        change_mode = "script"
        change_script {
          command       = "/bin/sh"
          args          = ["-c", "kill -USR1 1"]
          timeout       = "20s"
          fail_on_error = true
        }
      }

      template {
        data        = "noop"
        destination = "local/noop.txt"
        change_mode = "noop"
      }

      resources {
        cpu    = 100
        memory = 64
      }

      service {
        name = "pki-probe"
        port = "https"
        tags = ["probe", "tls"]
        provider = "nomad"
        check {
          type     = "tcp"
          interval = "10s"
          timeout  = "2s"
        }
      }
    }
  }
}
