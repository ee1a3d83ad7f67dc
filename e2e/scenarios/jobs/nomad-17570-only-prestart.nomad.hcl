# After hashicorp/nomad#17570 ("jobspec: Fixed a bug where a task group containing only lifecycle
# tasks and no main task was accepted during job validation"): a one-off migration written as a
# prestart task, with the service that should follow it forgotten.
job "migrate" {
  group "db" {
    task "migrate" {
      lifecycle {
        hook = "prestart"
      }

      driver = "docker"

      config {
        image   = "alpine:3.18"
        command = "sh"
        args    = ["-c", "echo migrating; sleep 1"]
      }
    }
  }
}
