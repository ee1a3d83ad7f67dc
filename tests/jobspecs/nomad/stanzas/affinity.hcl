# affinity at job, group and task level (job-specification/affinity).
job "affinity-docs" {
  affinity {
    attribute = "${node.datacenter}"
    value     = "us-west1"
    weight    = 100
  }

  group "example" {
    affinity {
      attribute = "${meta.rack}"
      value     = "r1"
      weight    = 50
    }

    task "server" {
      driver = "docker"

      affinity {
        attribute = "${meta.my_custom_value}"
        operator  = ">"
        value     = "3"
        weight    = 50
      }

      affinity {
        attribute = "${attr.kernel.name}"
        operator  = "set_contains_any"
        value     = "linux,freebsd"
        weight    = -20
      }

      config {
        image = "nginx:1.27"
      }
    }
  }
}
