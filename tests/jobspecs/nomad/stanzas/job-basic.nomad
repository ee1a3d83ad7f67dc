# The job block with its top-level parameters (job-specification/job).
job "docs" {
  region      = "global"
  datacenters = ["dc1", "dc2"]
  node_pool   = "default"
  namespace   = "default"
  type        = "service"
  priority    = 60
  all_at_once = false

  meta {
    team  = "platform"
    owner = "ops@example.com"
  }

  group "web" {
    count = 2

    network {
      port "http" {
        to = 8080
      }
    }

    task "server" {
      driver = "docker"

      config {
        image = "hashicorp/http-echo:1.0"
        args  = ["-listen", ":8080", "-text", "hello"]
        ports = ["http"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
