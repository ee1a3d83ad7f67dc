# artifact from S3 and GCS, with credentials passed as go-getter options.
job "artifact-cloud" {
  type = "batch"

  group "fetch" {
    task "download" {
      driver = "exec"

      artifact {
        source = "s3::https://s3.amazonaws.com/my-bucket/example/dataset.tar.gz"
        options {
          aws_access_key_id     = "AKIAIOSFODNN7EXAMPLE"
          aws_access_key_secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
        }
      }

      artifact {
        source      = "gcs::https://www.googleapis.com/storage/v1/my-bucket/model.bin"
        destination = "local/model"
      }

      config {
        command = "/bin/true"
      }
    }
  }
}
