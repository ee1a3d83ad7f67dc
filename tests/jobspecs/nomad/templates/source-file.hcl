# template: source from an artifact-downloaded template file, rendered with wait and splay.
job "tpl-source" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      artifact {
        source      = "https://example.com/templates/app.conf.tpl"
        destination = "local/app.conf.tpl"
        mode        = "file"
      }

      template {
        source      = "local/app.conf.tpl"
        destination = "local/app.conf"
        splay       = "10s"
        wait {
          min = "5s"
          max = "30s"
        }
      }

    }
  }
}
