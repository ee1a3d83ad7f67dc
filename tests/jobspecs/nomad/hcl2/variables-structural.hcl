# HCL2 variables of structural types: object and tuple, and "any".
variable "resources" {
  type = object({
    cpu    = number
    memory = number
  })
  default = {
    cpu    = 250
    memory = 128
  }
}

variable "entry" {
  type    = tuple([string, number, bool])
  default = ["worker", 2, true]
}

variable "extra_env" {
  type = any
  default = {
    LOG_FORMAT = "json"
  }
}

job "vars-structural" {
  group "g" {
    count = var.entry[1]

    task "t" {
      driver = "docker"

      config {
        image = "example/${var.entry[0]}:1.0"
      }

      env = var.extra_env

      resources {
        cpu    = var.resources.cpu
        memory = var.resources.memory
      }
    }
  }
}
