# Blue/green deployment: canary count equal to the group count, manual promotion.
job "docs-bluegreen" {
  datacenters = ["dc1"]

  group "api" {
    count = 5

    update {
      max_parallel     = 1
      canary           = 5
      min_healthy_time = "30s"
      healthy_deadline = "10m"
      # Nomad's UpdateStrategy.Validate: the healthy deadline must be below the progress deadline
      # (10m by default), so a 10m healthy deadline needs a longer one
      progress_deadline = "15m"
      auto_revert      = true
      auto_promote     = false
    }

    network {
      port "http" {}
    }

    service {
      name        = "api"
      port        = "http"
      tags        = ["blue"]
      canary_tags = ["green"]
    }

    task "api-server" {
      driver = "docker"

      config {
        image = "api-server:1.4"
        ports = ["http"]
      }
    }
  }
}
