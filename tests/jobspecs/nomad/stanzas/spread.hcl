# spread across datacenters with targets, and an even spread across racks.
job "spread-docs" {
  datacenters = ["us-east1", "us-west1"]

  spread {
    attribute = "${node.datacenter}"
    weight    = 100

    target "us-east1" {
      percent = 60
    }

    target "us-west1" {
      percent = 40
    }
  }

  group "web" {
    count = 10

    spread {
      attribute = "${meta.rack}"
    }

    task "server" {
      driver = "docker"

      config {
        image = "nginx:1.27"
      }
    }
  }
}
