# Dynamic AWS credentials from Vault rendered as task environment.
job "aws-creds" {
  type = "batch"

  group "g" {
    task "sync" {
      driver = "docker"

      config {
        image = "amazon/aws-cli:2.15.0"
        args  = ["s3", "sync", "/alloc/data", "s3://my-bucket/backup"]
      }

      vault {
        policies = ["aws-s3-writer"]
      }

      template {
        data        = <<-EOT
          {{ with secret "aws/creds/s3-writer" }}
          AWS_ACCESS_KEY_ID={{ .Data.access_key }}
          AWS_SECRET_ACCESS_KEY={{ .Data.secret_key }}
          {{ end }}
        EOT
        destination = "secrets/aws.env"
        env         = true
      }
    }
  }
}
