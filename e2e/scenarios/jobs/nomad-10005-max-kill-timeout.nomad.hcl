# After hashicorp/nomad#10005 ("Client configuration max_kill_timeout is not used"): a task that
# ignores its kill signal and asks for a kill_timeout longer than the client's max_kill_timeout
# (30s by default). The report ran the script with raw_exec; here it runs in a docker task (as in
# the related report #17023), which this lab runs without a trusted driver.
job "example" {
  group "example" {
    task "example" {
      driver       = "docker"
      kill_timeout = "2m"

      config {
        image   = "ubuntu:22.04"
        command = "/bin/sh"
        args    = ["/local/script.sh"]
      }

      template {
        data        = <<EOF
trap 'echo "Received SIGINT"' INT
trap 'echo "Received SIGTERM"' TERM
while true
do
  echo 'Running'
  sleep 1
done
EOF
        destination = "local/script.sh"
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
