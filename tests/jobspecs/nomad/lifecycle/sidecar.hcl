# lifecycle prestart sidecar: runs for the whole life of the allocation.
job "with-sidecar" {
  group "app" {
    task "log-forwarder" {
      driver = "docker"

      lifecycle {
        hook    = "prestart"
        sidecar = true
      }

      config {
        image = "fluent/fluent-bit:3.0"
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
