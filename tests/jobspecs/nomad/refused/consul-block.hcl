# consul block at group and task level: cluster, namespace, partition (job-specification/consul).
job "consul-docs" {
  group "example" {
    consul {
      cluster   = "default"
      namespace = "payments"
    }

    network {
      port "http" {}
    }

    service {
      name = "payments-api"
      port = "http"
    }

    task "server" {
      driver = "docker"

      consul {
        cluster   = "default"
        namespace = "default"
        partition = "default"
      }

      config {
        image = "example/payments:1.4"
        ports = ["http"]
      }
    }
  }
}
