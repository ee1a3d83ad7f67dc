# scaling at group level, with an autoscaler policy (job-specification/scaling).
job "autoscale-web" {
  group "web" {
    count = 2

    scaling {
      enabled = true
      min     = 1
      max     = 20

      policy {
        evaluation_interval = "5s"
        cooldown            = "1m"

        check "avg_cpu" {
          source = "nomad-apm"
          query  = "avg_cpu-allocated"

          strategy "target-value" {
            target = 70
          }
        }
      }
    }

    network {
      port "http" {
        to = 80
      }
    }

    task "nginx" {
      driver = "docker"

      config {
        image = "nginx:1.27"
        ports = ["http"]
      }
    }
  }
}
