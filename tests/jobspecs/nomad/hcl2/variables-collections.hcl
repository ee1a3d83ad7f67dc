# HCL2 variables of collection types: list, set, map.
variable "datacenters" {
  type    = list(string)
  default = ["dc1", "dc2"]
}

variable "tags" {
  type    = set(string)
  default = ["web", "public", "web"]
}

variable "labels" {
  type = map(string)
  default = {
    team = "platform"
    tier = "frontend"
  }
}

variable "ports" {
  type    = list(number)
  default = [8080, 8443]
}

job "vars-collections" {
  datacenters = var.datacenters
  meta        = var.labels

  group "web" {
    network {
      port "http" {
        to = var.ports[0]
      }
      port "https" {
        to = var.ports[1]
      }
    }

    service {
      name = "web"
      port = "http"
      tags = sort(var.tags)
    }

    task "web" {
      driver = "docker"

      config {
        image = "example/web:1.0"
        ports = ["http", "https"]
      }
    }
  }
}
