# A variable validation block with a condition and an error message.
variable "environment" {
  type    = string
  default = "staging"

  validation {
    condition     = contains(["dev", "staging", "prod"], var.environment)
    error_message = "The environment must be dev, staging or prod."
  }
}

variable "replicas" {
  type    = number
  default = 2

  validation {
    condition     = var.replicas >= 1 && var.replicas <= 10
    error_message = "Replicas must be between 1 and 10."
  }
}

job "validated" {
  meta {
    environment = var.environment
  }

  group "app" {
    count = var.replicas

    task "app" {
      driver = "docker"

      config {
        image = "example/app:${var.environment}"
      }
    }
  }
}
