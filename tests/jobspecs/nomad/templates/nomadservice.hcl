# nomadService lists Nomad-native services (provider = "nomad"); the agent answers from this node.
job "nomadservice" {
  group "g" {
    task "t" {
      driver = "docker"

      config {
        image = "nginx:1.27"
      }

      template {
        data        = <<-EOT
          upstream redis {
          {{ range nomadService "redis" }}
            server {{ .Address }}:{{ .Port }};
          {{ end }}
          }
        EOT
        destination = "local/upstream.conf"
      }
    }
  }
}
