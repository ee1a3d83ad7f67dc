# template: service and its options (tag filter, datacenter, health), an nginx upstream.
job "tpl-service" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      template {
        data        = <<-EOT
          upstream backend {
          {{- range service "web" }}
            server {{ .Address }}:{{ .Port }};
          {{- else }}
            server 127.0.0.1:65535; # force a 502
          {{- end }}
          }

          upstream canary {
          {{- range service "canary.web@dc1" "passing,warning" }}
            server {{ .Address }}:{{ .Port }} weight=1;
          {{- end }}
          }
        EOT
        destination   = "local/upstreams.conf"
        change_mode   = "signal"
        change_signal = "SIGHUP"
      }

    }
  }
}
