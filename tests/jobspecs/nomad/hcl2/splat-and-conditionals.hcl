# Splat expressions, conditionals and arithmetic/logic operators.
locals {
  nodes = [
    { name = "n1", cpu = 500 },
    { name = "n2", cpu = 1500 },
  ]
  names     = local.nodes[*].name
  total_cpu = local.nodes[0].cpu + local.nodes[1].cpu
  big       = local.total_cpu > 1000 && !false
}

job "splat" {
  group "g" {
    count = local.big ? 2 : 1

    task "t" {
      driver = "docker"

      config {
        image = "example/app:1.0"
        args  = concat(["--nodes"], local.names)
      }

      resources {
        cpu    = local.total_cpu / 4
        memory = 64 * 2 + 128 % 100
      }
    }
  }
}
