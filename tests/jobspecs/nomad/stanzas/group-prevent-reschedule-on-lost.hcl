# prevent_reschedule_on_lost keeps a lost allocation from being replaced (Nomad 1.8).
job "singleton" {
  group "leader" {
    prevent_reschedule_on_lost = true

    task "worker" {
      driver = "exec"

      config {
        command = "/bin/sleep"
        args    = ["infinity"]
      }
    }
  }
}
