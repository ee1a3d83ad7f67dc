# template: loop over a range of integers, with one and two arguments.
job "tpl-loop" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      template {
        data        = <<-EOT
          {{ range $i := loop 5 }}
          worker_{{ $i }} = true
          {{ end }}
          {{ range $i := loop 5 8 }}
          port_{{ $i }} = {{ add 8000 $i }}
          {{ end }}
        EOT
        destination = "local/workers.conf"
      }

    }
  }
}
