# raw_exec: run a shell script rendered by a template.
job "raw-exec-script" {
  type = "batch"

  group "g" {
    task "run" {
      driver = "raw_exec"

      template {
        data        = <<-EOT
          #!/bin/sh
          set -eu
          echo "alloc {{ env "NOMAD_ALLOC_ID" }} on {{ env "node.unique.name" }}"
        EOT
        destination = "local/run.sh"
        perms       = "0755"
      }

      config {
        command = "local/run.sh"
      }
    }
  }
}
