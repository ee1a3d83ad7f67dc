# lifecycle poststart (announce) and poststop (cleanup) hooks.
job "hooks" {
  group "app" {
    task "main" {
      driver = "exec"

      config {
        command = "/usr/local/bin/server"
      }
    }

    task "announce" {
      driver = "exec"

      lifecycle {
        hook = "poststart"
      }

      config {
        command = "/usr/bin/curl"
        args    = ["-fsS", "-X", "POST", "https://hooks.example.com/started/${NOMAD_ALLOC_ID}"]
      }
    }

    task "cleanup" {
      driver = "raw_exec"

      lifecycle {
        hook = "poststop"
      }

      config {
        command = "/bin/rm"
        args    = ["-rf", "/tmp/app-${NOMAD_ALLOC_ID}"]
      }
    }
  }
}
