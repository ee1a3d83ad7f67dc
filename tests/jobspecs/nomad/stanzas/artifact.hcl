# artifact: go-getter sources with checksum options and a destination.
job "artifact-docs" {
  type = "batch"

  group "fetch" {
    task "unpack" {
      driver = "exec"

      artifact {
        source      = "https://example.com/releases/tool_1.2.3_linux_amd64.tar.gz"
        destination = "local/tool"
        options {
          checksum = "sha256:5f9dcd4e27d2e0a6c9d05bcb3d9ae0a7e8dbdc1e1d47fd59e6b0d2d0b1f1a8d3"
        }
      }

      artifact {
        source = "https://example.com/config/app.json"
        mode   = "file"
        destination = "local/app.json"
      }

      config {
        command = "local/tool/bin/tool"
        args    = ["--config", "local/app.json"]
      }
    }
  }
}
