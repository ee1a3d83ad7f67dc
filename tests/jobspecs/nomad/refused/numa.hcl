# numa (Enterprise): reserve cores on one NUMA node.
job "numa-docs" {
  group "latency" {
    task "trader" {
      driver = "exec"

      config {
        command = "/opt/trader/bin/trader"
      }

      resources {
        cores  = 8
        memory = 8192

        numa {
          affinity = "require"
          devices  = ["nvidia/gpu"]
        }

        device "nvidia/gpu" {
          count = 1
        }
      }
    }
  }
}
