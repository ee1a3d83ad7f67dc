# After hashicorp/nomad#9989 ("Nomad doesn't respect Dockerfile's STOPSIGNAL directive"): a docker
# task with no kill_signal whose image sets STOPSIGNAL. The report's image set STOPSIGNAL 9; this
# task traps both signals and notes which one came, so the stop shows which one Nomad sent.
job "example" {
  group "api" {
    task "api" {
      driver = "docker"

      config {
        image   = "monacosl/connect-flask:latest"
        command = "sh"
        args    = ["-c", "trap 'echo got-USR1 >> /alloc/signals.txt; exit 0' USR1; trap 'echo got-TERM >> /alloc/signals.txt; exit 0' TERM; while true; do sleep 1; done"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
