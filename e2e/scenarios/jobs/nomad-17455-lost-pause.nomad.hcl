# After hashicorp/nomad#17299 (fixed by PR 17455, "docker: stop network pause container of lost
# alloc after node restart"): a bridge-networked service on the restarted client, stopped after the
# client came back. Its network (pause container, netns, port mapping) must go with it.
job "cache" {
  group "cache" {
    network {
      mode = "bridge"
      port "db" {
        to = 6379
      }
    }

    task "redis" {
      driver = "docker"

      config {
        image = "redis:7"
        ports = ["db"]
      }
    }
  }
}
