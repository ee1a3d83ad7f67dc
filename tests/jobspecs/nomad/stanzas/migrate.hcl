# migrate: how allocations move off a draining node.
job "migrate-docs" {
  migrate {
    max_parallel     = 2
    health_check     = "checks"
    min_healthy_time = "15s"
    healthy_deadline = "5m"
  }

  group "web" {
    count = 6

    migrate {
      max_parallel = 1
      health_check = "task_states"
    }

    task "web" {
      driver = "docker"

      config {
        image = "nginx:1.27"
      }
    }
  }
}
