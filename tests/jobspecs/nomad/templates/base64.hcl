# template: base64Encode, base64Decode and base64URLEncode.
job "tpl-base64" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      template {
        data        = <<-EOT
          TOKEN={{ key "app/token" | base64Encode }}
          CERT={{ key "app/cert_b64" | base64Decode }}
          URLSAFE={{ "a?b=c&d" | base64URLEncode }}
        EOT
        destination = "secrets/encoded.env"
        env         = true
      }

    }
  }
}
