# for expressions producing lists and maps, with if filters and grouping.
locals {
  instances = [
    { name = "a", zone = "east", enabled = true },
    { name = "b", zone = "west", enabled = false },
    { name = "c", zone = "east", enabled = true },
  ]
  enabled     = [for i in local.instances : i.name if i.enabled]
  by_name     = { for i in local.instances : i.name => i.zone }
  by_zone     = { for i in local.instances : i.zone => i.name... }
  upper_names = [for idx, i in local.instances : "${idx}:${upper(i.name)}"]
}

job "for-exprs" {
  meta {
    enabled = join(",", local.enabled)
    zone_a  = local.by_name["a"]
    east    = join(",", local.by_zone["east"])
    upper   = join(",", local.upper_names)
  }

  group "g" {
    task "t" {
      driver = "exec"

      config {
        command = "/bin/true"
      }
    }
  }
}
