# template: key, keyOrDefault and keyExists on Consul KV.
job "tpl-keys" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      template {
        data        = <<-EOT
          maxconn = {{ key "service/haproxy/maxconn" }}
          mode    = {{ keyOrDefault "service/haproxy/mode" "http" }}
          {{ if keyExists "service/haproxy/debug" }}debug = true{{ else }}debug = false{{ end }}
          dc2     = {{ key "service/haproxy/maxconn@dc2" }}
        EOT
        destination = "local/haproxy.conf"
      }

    }
  }
}
