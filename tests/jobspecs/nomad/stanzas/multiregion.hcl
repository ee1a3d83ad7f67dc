# multiregion (Enterprise): a rollout across two regions with a strategy.
job "multiregion-docs" {
  type = "service"

  multiregion {
    strategy {
      max_parallel = 1
      on_failure   = "fail_all"
    }

    region "west" {
      count       = 2
      datacenters = ["west-1"]
      meta {
        my-key = "west"
      }
    }

    region "east" {
      count       = 1
      datacenters = ["east-1", "east-2"]
      node_pool   = "prod"
    }
  }

  group "cache" {
    count = 0

    task "redis" {
      driver = "docker"

      config {
        image = "redis:7"
      }
    }
  }
}
