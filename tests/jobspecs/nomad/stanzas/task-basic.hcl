# The task block: user, kill_timeout, kill_signal, leader, shutdown_delay, env, kind.
job "task-docs" {
  group "app" {
    task "main" {
      driver         = "exec"
      user           = "nobody"
      leader         = true
      kill_timeout   = "20s"
      kill_signal    = "SIGINT"
      shutdown_delay = "3s"

      config {
        command = "/usr/bin/python3"
        args    = ["-m", "http.server", "8000"]
      }

      env {
        PYTHONUNBUFFERED = "1"
        APP_ENV          = "staging"
      }

      resources {
        cpu    = 200
        memory = 128
      }
    }

    task "log-shipper" {
      driver = "docker"

      config {
        image = "busybox:1.36"
        args  = ["tail", "-F", "/alloc/logs/main.stdout.0"]
      }
    }
  }
}
