# template: timestamp with and without a Go layout.
job "tpl-timestamp" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      template {
        data        = <<-EOT
          rendered_at = "{{ timestamp }}"
          date        = "{{ timestamp "2006-01-02" }}"
          unix        = {{ timestamp "unix" }}
        EOT
        destination = "local/rendered.txt"
      }

    }
  }
}
