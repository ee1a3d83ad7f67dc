# Two services on one task, one per port, and a group service with a task name.
job "multi-svc" {
  group "app" {
    network {
      port "http" {}
      port "metrics" {}
    }

    service {
      name = "app-group-level"
      port = "http"
      task = "app"

      check {
        type     = "script"
        command  = "/bin/true"
        interval = "30s"
        timeout  = "5s"
        task     = "app"
      }
    }

    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
        ports = ["http", "metrics"]
      }

      service {
        name = "app"
        port = "http"
      }

      service {
        name = "app-metrics"
        port = "metrics"
        tags = ["prometheus"]
      }
    }
  }
}
