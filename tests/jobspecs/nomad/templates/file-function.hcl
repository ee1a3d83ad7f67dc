# template: file reads another file of the task dir into the output.
job "tpl-file" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      artifact {
        source      = "https://example.com/motd.txt"
        destination = "local/motd.txt"
        mode        = "file"
      }

      template {
        data        = <<-EOT
          # generated at {{ timestamp }}
          {{ file "local/motd.txt" }}
        EOT
        destination = "local/banner.txt"
      }

    }
  }
}
