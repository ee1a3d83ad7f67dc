# A periodic sysbatch job: runs once on every node every hour.
job "node-cleanup" {
  type = "sysbatch"

  periodic {
    crons = ["@hourly", "30 */4 * * *"]
  }

  group "cleanup" {
    task "prune" {
      driver = "raw_exec"

      config {
        command = "/usr/bin/docker"
        args    = ["image", "prune", "-f"]
      }
    }
  }
}
