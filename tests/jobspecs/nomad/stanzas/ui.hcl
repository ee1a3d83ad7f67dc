# ui: a description (markdown) and links shown in the web UI (Nomad 1.8).
job "ui-docs" {
  ui {
    description = "A **simple** HTTP echo service. See the [runbook](https://runbooks.example.com/echo)."

    link {
      label = "Learn more about Nomad"
      url   = "https://developer.hashicorp.com/nomad"
    }

    link {
      label = "Grafana dashboard"
      url   = "https://grafana.example.com/d/echo"
    }
  }

  group "echo" {
    task "echo" {
      driver = "docker"

      config {
        image = "hashicorp/http-echo:1.0"
        args  = ["-text", "hello"]
      }
    }
  }
}
