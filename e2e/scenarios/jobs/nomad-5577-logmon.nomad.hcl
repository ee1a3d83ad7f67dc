# After hashicorp/nomad#5577 ("client: Fix issue with recovering from logmon failures", reported as
# #5613 "Turn-off VM sometimes cause not starting our ruby webserver"): a process task that logs
# now and then; its logmon dies while the client is down, and the client must start a new one when
# it reattaches the task.
job "webserver" {
  group "web" {
    task "web" {
      driver = "exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "i=0; while true; do echo \"tick $i\"; i=$((i+1)); sleep 1; done"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
