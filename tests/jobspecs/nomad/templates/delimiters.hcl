# template: left_delimiter/right_delimiter for a file that uses {{ }} itself.
job "tpl-delims" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      template {
        data            = <<-EOT
          # a Helm-like file: {{ .Values.kept }} is left alone
          address = "[[ env "NOMAD_ADDR_http" ]]"
          [[ range service "redis" ]]redis = "[[ .Address ]]:[[ .Port ]]"
          [[ end ]]
        EOT
        destination     = "local/values.yaml"
        left_delimiter  = "[["
        right_delimiter = "]]"
      }

    }
  }
}
