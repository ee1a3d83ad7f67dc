# HCL2 type conversion and error handling in Nomad: convert() with type expressions, try, can,
# and the automatic conversions HCL applies (number and bool to string).
variable "config" {
  type = any
  default = {
    replicas = "3"
    debug    = "true"
  }
}

job "fn-convert" {
  group "g" {
    count = convert(var.config.replicas, number)

    task "t" {
      driver = "docker"

      config {
        image = "example/app:1.0"
        args  = convert(distinct(["--a", "--b", "--a"]), list(string))
      }

      meta {
        debug   = convert(convert(var.config.debug, bool), string)
        timeout = try(var.config.timeout, "30s")
        has_tls = can(var.config.tls.enabled)
        as_map  = jsonencode(convert({ a = "1", b = "2" }, map(string)))
        as_num  = convert("42", number) + 1
        nested  = jsonencode(convert([{ n = 1 }], list(object({ n = number }))))
      }
    }
  }
}
