# One group mixing docker, exec and raw_exec tasks.
job "mixed" {
  group "g" {
    task "web" {
      driver = "docker"

      config {
        image = "nginx:1.27"
      }
    }

    task "watcher" {
      driver = "exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "while sleep 10; do ls ${NOMAD_ALLOC_DIR}; done"]
      }
    }

    task "host-probe" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "while sleep 30; do df -h /; done"]
      }
    }
  }
}
