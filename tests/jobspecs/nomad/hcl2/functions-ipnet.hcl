# HCL2 IP network functions: cidrhost, cidrnetmask, cidrsubnet, cidrsubnets.
variable "vpc_cidr" {
  type    = string
  default = "10.20.0.0/16"
}

job "fn-ipnet" {
  group "g" {
    network {
      mode = "bridge"

      dns {
        servers = [cidrhost(var.vpc_cidr, 2)]
      }
    }

    task "t" {
      driver = "docker"

      config {
        image = "example/router:1.0"
      }

      env {
        NETMASK = cidrnetmask("172.16.0.0/12")
        SUBNET  = cidrsubnet(var.vpc_cidr, 8, 3)
        SUBNETS = join(",", cidrsubnets("10.1.0.0/16", 4, 4, 8))
      }
    }
  }
}
