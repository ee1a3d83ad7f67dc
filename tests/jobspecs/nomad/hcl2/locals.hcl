# locals blocks: values computed once and reused, referring to variables and other locals.
variable "app" {
  type    = string
  default = "billing"
}

variable "version" {
  type    = string
  default = "2.4.1"
}

locals {
  image    = "registry.example.com/${var.app}:${var.version}"
  major    = split(".", var.version)[0]
  job_name = "${var.app}-v${local.major}"
}

locals {
  common_env = {
    APP     = var.app
    VERSION = var.version
  }
}

job "locals-demo" {
  name = local.job_name

  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = local.image
      }

      env = merge(local.common_env, { EXTRA = "1" })
    }
  }
}
