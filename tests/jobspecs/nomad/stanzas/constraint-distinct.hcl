# distinct_hosts and distinct_property constraints, at job and group level.
job "distinct" {
  constraint {
    operator = "distinct_hosts"
    value    = "true"
  }

  group "zookeeper" {
    count = 3

    constraint {
      operator  = "distinct_property"
      attribute = "${meta.rack}"
      value     = "1"
    }

    task "zk" {
      driver = "docker"

      config {
        image = "zookeeper:3.9"
      }

      constraint {
        attribute = "${attr.unique.storage.volume}"
        operator  = "regexp"
        value     = "^/dev/(sd|nvme)"
      }
    }
  }
}
