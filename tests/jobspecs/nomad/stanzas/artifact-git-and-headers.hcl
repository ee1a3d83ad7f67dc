# artifact from git with a ref and depth, and one with HTTP headers and chown.
job "artifact-git" {
  type = "batch"

  group "build" {
    task "checkout" {
      driver = "exec"

      artifact {
        source      = "git::https://github.com/hashicorp/nomad-guides"
        destination = "local/repo"
        options {
          ref   = "main"
          depth = 1
        }
      }

      artifact {
        source      = "https://artifacts.example.com/private/bundle.zip"
        destination = "local/bundle"
        chown       = true
        headers {
          User-Agent    = "nomad-[${NOMAD_JOB_ID}]"
          X-Nomad-Alloc = "${NOMAD_ALLOC_ID}"
        }
      }

      config {
        command = "/bin/ls"
        args    = ["-R", "local"]
      }
    }
  }
}
