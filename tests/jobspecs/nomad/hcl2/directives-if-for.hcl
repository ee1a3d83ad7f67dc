# HCL template directives in a heredoc: %{ if }, %{ else }, %{ for }, strip markers ~.
variable "peers" {
  type    = list(string)
  default = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
}

variable "tls" {
  type    = bool
  default = true
}

job "directives" {
  group "g" {
    task "t" {
      driver = "docker"

      config {
        image = "example/cluster:1.0"
      }

      template {
        destination = "local/cluster.conf"
        data        = <<-EOT
          %{ for i, p in var.peers ~}
          peer.${i} = ${p}
          %{ endfor ~}
          %{ if var.tls ~}
          tls = on
          %{ else ~}
          tls = off
          %{ endif ~}
          node = {{ env "node.unique.name" }}
        EOT
      }
    }
  }
}
