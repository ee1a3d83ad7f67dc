# Variables in group counts, task config, service names and durations.
variable "service_name" {
  type    = string
  default = "orders"
}

variable "check_interval" {
  type    = string
  default = "15s"
}

variable "kill_timeout" {
  type    = string
  default = "30s"
}

job "vars-everywhere" {
  group "api" {
    network {
      port "http" {}
    }

    service {
      name = "${var.service_name}-api"
      port = "http"

      check {
        type     = "http"
        path     = "/health"
        interval = var.check_interval
        timeout  = "2s"
      }
    }

    task "api" {
      driver       = "docker"
      kill_timeout = var.kill_timeout

      config {
        image = "example/${var.service_name}:1.0"
        ports = ["http"]
      }
    }
  }
}
