# raw_exec: a host binary with no isolation (the driver must be enabled on the client).
job "raw-exec-basic" {
  type = "batch"

  group "g" {
    task "uptime" {
      driver = "raw_exec"

      config {
        command = "/usr/bin/uptime"
      }
    }
  }
}
