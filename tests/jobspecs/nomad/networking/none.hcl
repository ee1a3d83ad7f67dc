# network mode "none": a batch task without network access.
job "offline" {
  type = "batch"

  group "g" {
    network {
      mode = "none"
    }

    task "compute" {
      driver = "exec"

      config {
        command = "/usr/bin/sha256sum"
        args    = ["/local/input.bin"]
      }
    }
  }
}
