# kill_timeout, kill_signal and a leader task whose exit stops its siblings.
job "graceful" {
  group "g" {
    task "leader" {
      driver       = "docker"
      leader       = true
      kill_timeout = "45s"
      kill_signal  = "SIGQUIT"

      config {
        image = "nginx:1.27"
      }
    }

    task "follower" {
      driver      = "exec"
      kill_signal = "SIGTERM"

      config {
        command = "/bin/sleep"
        args    = ["infinity"]
      }
    }
  }
}
