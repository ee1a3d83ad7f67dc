# After hashicorp/nomad#18034 ("Allocation Logs Immediately Removed on Allocation Replacement"): a
# service with a sticky ephemeral disk whose first run fails; its replacement lands on the same
# client and takes the disk over. The failed run's logs are what the operator needs to read.
job "sticky" {
  group "app" {
    ephemeral_disk {
      sticky = true
      size   = 300
    }

    restart {
      attempts = 0
      mode     = "fail"
    }

    task "app" {
      driver = "docker"

      config {
        image   = "ubuntu:22.04"
        command = "sh"
        args    = ["-c", "if [ -f /alloc/data/ran ]; then exec sleep 3600; fi; touch /alloc/data/ran; echo 'first run: failing'; exit 1"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
