# template: perms, uid, gid and error_on_missing_key.
job "tpl-perms" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      vault {
        policies = ["app-read"]
      }

      template {
        data                 = <<-EOT
          {{ with secret "secret/app/tls" }}{{ .Data.key }}{{ end }}
        EOT
        destination          = "secrets/tls.key"
        perms                = "0400"
        uid                  = 1000
        gid                  = 1000
        error_on_missing_key = true
      }

    }
  }
}
