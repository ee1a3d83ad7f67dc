# After hashicorp/nomad#5883's job (example-restored): a batch job whose one task leaves a trace and
# exits 0 at once. The report's task ran a script that appended to /tmp/debug-alloc-restore; here the
# trace is a line in the alloc dir, which a run twice shows as two lines.
job "example-restored" {
  type = "batch"

  group "example" {
    task "main" {
      driver = "docker"

      config {
        image   = "alpine:3.9"
        command = "/bin/sh"
        args    = ["-c", "date >> ${NOMAD_ALLOC_DIR}/data/debug-alloc-restore; echo ran"]
      }

      restart {
        attempts = 0
        mode     = "fail"
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
