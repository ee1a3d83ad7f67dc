# Inline %{ } directives inside quoted strings, and $${ / %%{ escapes kept literal.
variable "debug" {
  type    = bool
  default = false
}

variable "features" {
  type    = list(string)
  default = ["a", "b"]
}

job "directives-inline" {
  group "g" {
    task "t" {
      driver = "exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "echo %{ if var.debug }debug%{ else }quiet%{ endif } %{ for f in var.features }${f},%{ endfor } $${HOME} %%{literal}"]
      }
    }
  }
}
