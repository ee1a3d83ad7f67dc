# update: canaries with auto_promote and auto_revert (job-specification/update).
job "canary-docs" {
  update {
    max_parallel      = 1
    canary            = 1
    min_healthy_time  = "10s"
    healthy_deadline  = "5m"
    progress_deadline = "10m"
    auto_revert       = true
    auto_promote      = true
    health_check      = "checks"
    stagger           = "30s"
  }

  group "web" {
    count = 3

    update {
      canary       = 3
      max_parallel = 3
    }

    network {
      port "http" {
        to = 8080
      }
    }

    service {
      name        = "web"
      port        = "http"
      tags        = ["live"]
      canary_tags = ["canary"]

      check {
        type     = "http"
        path     = "/health"
        interval = "5s"
        timeout  = "1s"
      }
    }

    task "web" {
      driver = "docker"

      config {
        image = "hashicorp/http-echo:1.0"
        args  = ["-listen", ":8080", "-text", "v2"]
        ports = ["http"]
      }
    }
  }
}
