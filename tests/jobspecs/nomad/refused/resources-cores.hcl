# resources: cores instead of cpu, memory_max oversubscription, secrets tmpfs size.
job "resources-docs" {
  group "compute" {
    task "cruncher" {
      driver = "docker"

      config {
        image = "example/cruncher:3"
      }

      resources {
        cores      = 2
        memory     = 1024
        memory_max = 2048
        secrets    = 16
      }
    }

    task "sidecar" {
      driver = "docker"

      config {
        image = "busybox:1.36"
        args  = ["sleep", "infinity"]
      }

      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}
