# template: parseJSON, parseInt, parseBool, parseFloat on KV values.
job "tpl-parse" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      template {
        data        = <<-EOT
          {{ with $c := key "config/app/json" | parseJSON }}
          name = "{{ $c.name }}"
          {{ end }}
          {{ $n := key "config/app/workers" | parseInt }}workers = {{ $n }}
          {{ if key "config/app/debug" | parseBool }}log_level = "debug"{{ end }}
          ratio = {{ key "config/app/ratio" | parseFloat }}
        EOT
        destination = "local/app.hcl"
      }

    }
  }
}
