# HCL2 nested type constraints: map(object), list(object), map(list(string)).
variable "services" {
  type = map(object({
    port = number
    tags = list(string)
  }))
  default = {
    api   = { port = 8080, tags = ["v1"] }
    admin = { port = 9090, tags = ["internal", "v1"] }
  }
}

variable "mounts" {
  type = list(object({
    src = string
    dst = string
  }))
  default = [
    { src = "local/app.conf", dst = "/etc/app.conf" },
    { src = "secrets/key", dst = "/run/key" },
  ]
}

variable "dns" {
  type = map(list(string))
  default = {
    servers  = ["10.0.0.2"]
    searches = ["service.consul"]
  }
}

job "vars-nested" {
  group "g" {
    network {
      dns {
        servers  = var.dns.servers
        searches = var.dns["searches"]
      }

      port "api" {
        to = var.services.api.port
      }

      port "admin" {
        to = var.services["admin"].port
      }
    }

    task "app" {
      driver = "docker"

      config {
        image   = "example/app:1.0"
        ports   = keys(var.services)
        volumes = [for m in var.mounts : "${m.src}:${m.dst}"]
      }
    }
  }
}
