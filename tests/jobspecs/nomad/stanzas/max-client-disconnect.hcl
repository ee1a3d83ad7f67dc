# The pre-1.8 group fields that disconnect replaced; still accepted by Nomad.
job "legacy-disconnect" {
  group "a" {
    max_client_disconnect = "1h"

    task "a" {
      driver = "exec"

      config {
        command = "/bin/sleep"
        args    = ["infinity"]
      }
    }
  }

  group "b" {
    stop_after_client_disconnect = "90s"

    task "b" {
      driver = "exec"

      config {
        command = "/bin/sleep"
        args    = ["infinity"]
      }
    }
  }
}
