# lifecycle prestart: wait for a dependency before the main task starts.
job "init-wait" {
  group "app" {
    task "await-db" {
      driver = "docker"

      lifecycle {
        hook    = "prestart"
        sidecar = false
      }

      config {
        image   = "busybox:1.36"
        command = "sh"
        args    = ["-c", "until nslookup db.service.consul 2>&1 >/dev/null; do sleep 2; done"]
      }

      resources {
        cpu    = 50
        memory = 32
      }
    }

    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }
    }
  }
}
