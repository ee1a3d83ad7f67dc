# Go template builtins: html, js, urlquery, slice, call-free pipelines, and nested index.
job "tpl-go-builtins" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      template {
        data        = <<-EOT
          {{ $m := key "app/json" | parseJSON }}
          first_user = {{ index $m "users" 0 }}
          html       = {{ "<b>bold</b>" | html }}
          js         = {{ "it's" | js }}
          query      = {{ "a b&c" | urlquery }}
          prefix     = {{ slice "abcdef" 1 3 }}
        EOT
        destination = "local/builtins.txt"
      }

    }
  }
}
