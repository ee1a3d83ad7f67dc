# lifecycle poststart sidecar: starts after the main task and keeps running.
job "poststart-sidecar" {
  group "app" {
    task "db" {
      driver = "docker"

      config {
        image = "postgres:16"
      }
    }

    task "exporter" {
      driver = "docker"

      lifecycle {
        hook    = "poststart"
        sidecar = true
      }

      config {
        image = "prometheuscommunity/postgres-exporter:v0.15.0"
      }
    }
  }
}
