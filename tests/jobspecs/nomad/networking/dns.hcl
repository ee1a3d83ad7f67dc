# network.dns: servers, searches and options for the group's network namespace.
job "dns-docs" {
  group "g" {
    network {
      mode = "bridge"

      dns {
        servers  = ["10.0.0.2", "1.1.1.1"]
        searches = ["service.consul", "example.com"]
        options  = ["ndots:2", "timeout:1"]
      }
    }

    task "app" {
      driver = "docker"

      config {
        image = "busybox:1.36"
        args  = ["sleep", "infinity"]
      }
    }
  }
}
