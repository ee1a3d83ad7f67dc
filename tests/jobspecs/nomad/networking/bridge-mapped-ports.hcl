# bridge networking: dynamic ports mapped to fixed container ports.
job "bridge-ports" {
  group "web" {
    network {
      mode = "bridge"

      port "http" {
        to = 8080
      }

      port "metrics" {
        to = 9102
      }
    }

    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
        ports = ["http", "metrics"]
      }
    }
  }
}
