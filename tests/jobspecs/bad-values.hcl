# Every line marked "bad" is a problem the parser must report; all of them in one pass.
job "bad" {
  type = "daemon"                       # bad: not a job type
  colour = "blue"                       # bad: not a Nomad field

  group "web" {
    count = -1                          # bad: negative

    network {
      mode = "overlay"                  # bad: not bridge/host/none
      port "www" {
        to = 70000                      # bad: not a port
      }
    }

    task "http" {
      driver = "docker"
      kill_timeout = "20 seconds"       # bad: not a duration
      kill_signal = "SIGBOGUS"          # bad: not a signal
      config {
        command = "httpd"               # bad: docker needs config.image
        ports   = ["http"]              # bad: the network has no port "http"
      }
      template {
        data        = "x"
        destination = "../../etc/passwd"   # bad: escapes the task dir
        change_mode = "reload"          # bad: not a change mode
      }
    }

    task "http" {                       # bad: duplicate task name
      driver = "java"                   # bad: a driver this agent does not run
    }
  }
}
