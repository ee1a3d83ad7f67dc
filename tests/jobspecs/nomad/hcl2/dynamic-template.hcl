# dynamic "template": one template per config file, over a list of objects.
variable "files" {
  type = list(object({
    name = string
    body = string
  }))
  default = [
    { name = "a.conf", body = "alpha={{ env \"NOMAD_ALLOC_INDEX\" }}" },
    { name = "b.conf", body = "beta=2" },
  ]
}

job "dyn-templates" {
  group "g" {
    task "t" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      dynamic "template" {
        for_each = var.files

        content {
          data        = template.value.body
          destination = "local/${template.value.name}"
          change_mode = "noop"
        }
      }
    }
  }
}
