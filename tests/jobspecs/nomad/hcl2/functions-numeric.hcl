# HCL2 numeric functions: max, min, ceil, floor, abs, pow, signum, log, parseint.
variable "memory_gb" {
  type    = number
  default = 1.5
}

job "fn-numeric" {
  group "g" {
    count = max(1, min(5, ceil(var.memory_gb * 2)))

    task "t" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      resources {
        cpu    = floor(abs(-250.7))
        memory = pow(2, 8)
      }

      meta {
        sign  = format("%d", signum(-3))
        log2  = format("%.0f", log(1024, 2))
        hex   = format("%d", parseint("ff", 16))
        octal = format("%d", parseint("0755", 8))
      }
    }
  }
}
