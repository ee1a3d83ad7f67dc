# A sysbatch job: run once on every eligible node, then finish.
job "apt-refresh" {
  type = "sysbatch"

  constraint {
    attribute = "${attr.os.name}"
    value     = "ubuntu"
  }

  group "refresh" {
    task "apt" {
      driver = "raw_exec"

      config {
        command = "/usr/bin/apt-get"
        args    = ["update", "-q"]
      }
    }
  }
}
