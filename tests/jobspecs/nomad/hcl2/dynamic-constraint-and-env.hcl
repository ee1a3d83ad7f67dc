# dynamic "constraint" over a list, and dynamic "volume_mount" over a set.
variable "required_attrs" {
  type    = list(string)
  default = ["$${attr.driver.docker}", "$${attr.cpu.numcores}"]
}

variable "mounts" {
  type    = set(string)
  default = ["certs", "data"]
}

job "dyn-misc" {
  dynamic "constraint" {
    for_each = var.required_attrs

    content {
      attribute = constraint.value
      operator  = "is_set"
    }
  }

  group "g" {
    dynamic "volume" {
      for_each = var.mounts

      labels = [volume.value]

      content {
        type   = "host"
        source = volume.value
      }
    }

    task "t" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      dynamic "volume_mount" {
        for_each = var.mounts

        content {
          volume      = volume_mount.value
          destination = "/srv/${volume_mount.value}"
        }
      }
    }
  }
}
