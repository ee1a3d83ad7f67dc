# After hashicorp/nomad#16240 ("services: Fixed a bug where check_restart on nomad services on tasks
# failed with incorrect CheckIDs"): a web task behind a Nomad-native service whose http check goes
# bad some seconds into its first run (its health page removed) and is fine after a restart;
# check_restart should restart it. The task notes every start in alloc/data/starts.
job "web" {
  datacenters = ["dc1"]

  group "web" {
    network {
      port "http" {}
    }

    restart {
      attempts = 2
      delay    = "2s"
      interval = "5m"
      mode     = "fail"
    }

    task "web" {
      driver = "exec"

      config {
        command = "/bin/sh"
        args = ["-c", <<EOT
echo start >> "$NOMAD_ALLOC_DIR/data/starts"
mkdir -p "$NOMAD_TASK_DIR/www" && echo ok > "$NOMAD_TASK_DIR/www/health"
if [ ! -e "$NOMAD_TASK_DIR/ran" ]; then
  touch "$NOMAD_TASK_DIR/ran"
  (sleep 8; rm -f "$NOMAD_TASK_DIR/www/health") &
fi
exec busybox httpd -f -p "$NOMAD_PORT_http" -h "$NOMAD_TASK_DIR/www"
EOT
        ]
      }

      service {
        name     = "web"
        provider = "nomad"
        port     = "http"

        check {
          name     = "alive"
          type     = "http"
          path     = "/health"
          interval = "2s"
          timeout  = "1s"

          check_restart {
            limit = 2
            grace = "4s"
          }
        }
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
