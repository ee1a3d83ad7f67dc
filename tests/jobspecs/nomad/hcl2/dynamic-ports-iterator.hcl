# dynamic "port" with a named iterator, inside a network block.
variable "ports" {
  type = map(number)
  default = {
    http    = 8080
    metrics = 9102
    grpc    = 9090
  }
}

job "dyn-ports" {
  group "g" {
    network {
      mode = "bridge"

      dynamic "port" {
        for_each = var.ports
        iterator = p
        labels   = [p.key]

        content {
          to = p.value
        }
      }
    }

    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
        ports = keys(var.ports)
      }
    }
  }
}
