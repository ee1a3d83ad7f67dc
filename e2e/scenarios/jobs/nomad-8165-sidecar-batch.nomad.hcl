# After hashicorp/nomad#8165 ("Sidecar hangs after main tasks finish in batch jobs"): a batch job
# whose group runs a long-lived prestart sidecar (a proxy) beside a main task that does its work and
# exits 0. Nomad should kill the sidecar once the main task is done and complete the alloc.
job "sidecar-batch" {
  type = "batch"

  group "work" {
    task "proxy" {
      lifecycle {
        hook    = "prestart"
        sidecar = true
      }

      driver = "docker"

      config {
        image = "envoyproxy/envoy:v1.14.2"
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }

    task "main" {
      driver = "docker"

      config {
        image   = "alpine:3.12"
        command = "sh"
        args    = ["-c", "echo working; sleep 3; echo done"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
