# A variable whose default is null, made optional with a conditional and coalesce.
variable "registry" {
  type    = string
  default = null
}

variable "image_name" {
  type    = string
  default = "app"
}

job "null-default" {
  group "g" {
    task "t" {
      driver = "docker"

      config {
        image = var.registry == null ? "${var.image_name}:latest" : "${var.registry}/${var.image_name}:latest"
        hostname = coalesce(var.registry, "no-registry")
      }
    }
  }
}
