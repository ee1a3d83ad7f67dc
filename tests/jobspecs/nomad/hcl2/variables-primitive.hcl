# HCL2 input variables of primitive types, with defaults and descriptions.
variable "image" {
  type        = string
  description = "The container image to run"
  default     = "nginx:1.27"
}

variable "count" {
  type    = number
  default = 3
}

variable "canary_enabled" {
  type    = bool
  default = false
}

job "vars-primitive" {
  group "web" {
    count = var.count

    update {
      canary = var.canary_enabled ? 1 : 0
    }

    task "nginx" {
      driver = "docker"

      config {
        image = var.image
      }
    }
  }
}
