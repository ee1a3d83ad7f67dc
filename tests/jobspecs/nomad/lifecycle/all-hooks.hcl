# Every lifecycle hook in one group, batch job.
job "all-hooks" {
  type = "batch"

  group "g" {
    task "prep" {
      driver = "docker"
      lifecycle {
        hook = "prestart"
      }
      config {
        image = "busybox:1.36"
        args  = ["sh", "-c", "echo prep > /alloc/data/state"]
      }
    }

    task "proxy" {
      driver = "docker"
      lifecycle {
        hook    = "prestart"
        sidecar = true
      }
      config {
        image = "envoyproxy/envoy:v1.29.2"
      }
    }

    task "work" {
      driver = "docker"
      config {
        image = "busybox:1.36"
        args  = ["sh", "-c", "cat /alloc/data/state; sleep 10"]
      }
    }

    task "notify" {
      driver = "docker"
      lifecycle {
        hook = "poststart"
      }
      config {
        image = "curlimages/curl:8.8.0"
        args  = ["-fsS", "https://hooks.example.com/started"]
      }
    }

    task "report" {
      driver = "docker"
      lifecycle {
        hook = "poststop"
      }
      config {
        image = "busybox:1.36"
        args  = ["sh", "-c", "echo done"]
      }
    }
  }
}
