# HCL2 date functions: formatdate and timeadd on fixed timestamps.
locals {
  release = "2024-06-01T12:00:00Z"
}

job "fn-datetime" {
  meta {
    released = formatdate("DD MMM YYYY hh:mm ZZZ", local.release)
    expires  = timeadd(local.release, "720h")
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
