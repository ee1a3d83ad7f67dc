# device requests in resources, with constraint and affinity on device attributes.
job "gpu-train" {
  type = "batch"

  group "train" {
    task "trainer" {
      driver = "docker"

      config {
        image = "nvidia/cuda:12.4.1-base-ubuntu22.04"
        args  = ["nvidia-smi"]
      }

      resources {
        cpu    = 2000
        memory = 4096

        device "nvidia/gpu" {
          count = 2

          constraint {
            attribute = "${device.attr.memory}"
            operator  = ">="
            value     = "2 GiB"
          }

          affinity {
            attribute = "${device.attr.memory}"
            operator  = ">="
            value     = "4 GiB"
            weight    = 75
          }
        }

        device "intel/fpga" {}
      }
    }
  }
}
