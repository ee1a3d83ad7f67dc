# After hashicorp/nomad#25714 ("client: fix failure cleaning up namespace on batch jobs"): a batch
# job of exec tasks in a bridge network, run and done in a few seconds, as a nightly batch of them
# would be on the node.
job "nightly-report" {
  type = "batch"

  group "report" {
    network {
      mode = "bridge"
    }

    task "report" {
      driver = "exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "sleep 3; echo report done"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
