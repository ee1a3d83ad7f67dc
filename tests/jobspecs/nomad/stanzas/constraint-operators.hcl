# constraint with each operator from job-specification/constraint.
job "constraints" {
  constraint {
    attribute = "${attr.kernel.name}"
    value     = "linux"
  }

  constraint {
    attribute = "${attr.cpu.arch}"
    operator  = "!="
    value     = "arm"
  }

  constraint {
    attribute = "${attr.kernel.version}"
    operator  = "version"
    value     = ">= 5.10, < 7.0"
  }

  constraint {
    attribute = "${attr.nomad.version}"
    operator  = "semver"
    value     = ">= 1.6.0-beta.1"
  }

  constraint {
    attribute = "${meta.cached_binaries}"
    operator  = "set_contains"
    value     = "redis,cypress,nginx"
  }

  constraint {
    attribute = "${meta.zones}"
    operator  = "set_contains_any"
    value     = "a,b"
  }

  constraint {
    attribute = "${node.unique.name}"
    operator  = "regexp"
    value     = "^client-[0-9]+$"
  }

  constraint {
    attribute = "${meta.gpu_model}"
    operator  = "is_not_set"
  }

  constraint {
    attribute = "${attr.driver.docker}"
    operator  = "is_set"
  }

  constraint {
    attribute = "${attr.memory.totalbytes}"
    operator  = ">="
    value     = "2147483648"
  }

  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = "alpine:3.20"
        args  = ["sleep", "3600"]
      }
    }
  }
}
