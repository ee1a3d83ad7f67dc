# HCL2 string functions: format, formatlist, join, split, upper, lower, title, replace,
# regex_replace, substr, strrev, trim*, chomp, indent.
locals {
  name   = "  Billing_Service  "
  clean  = trimspace(local.name)
  words  = split("_", lower(local.clean))
  hosts  = formatlist("%s.service.consul", ["api", "db"])
}

job "fn-string" {
  meta {
    slug     = join("-", local.words)
    upper    = upper(local.clean)
    title    = title("hello world")
    replaced = replace(local.clean, "_", " ")
    regexed  = regex_replace(local.clean, "[^A-Za-z]", "")
    short    = substr(local.clean, 0, 4)
    reversed = strrev("abc")
    trimmed  = trim("--x--", "-")
    noprefix = trimprefix("v1.2.3", "v")
    nosuffix = trimsuffix("app.conf", ".conf")
    chomped  = chomp("line\n")
    hosts    = join(",", local.hosts)
    padded   = format("%05d|%-6s|%.1f", 42, "x", 2.55)
    indented = indent(2, "a\nb")
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
