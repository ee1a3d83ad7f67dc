# HCL2 string matching in Nomad: regex_replace (RE2 with capture groups), replace and strlen.
locals {
  version = "v1.12.3-beta"
  major   = regex_replace(local.version, "^v(\\d+)\\..*$", "$1")
  minor   = regex_replace(local.version, "^v\\d+\\.(\\d+)\\..*$", "$1")
  digits  = regex_replace("a1b22c333", "[^0-9]", "")
}

job "fn-regex" {
  meta {
    major   = local.major
    minor   = local.minor
    count   = strlen(local.digits)
    is_beta = replace(local.version, "-beta", "") != local.version
    slug    = lower(regex_replace("Hello, World!", "[^A-Za-z]+", "-"))
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
