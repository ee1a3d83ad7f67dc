# template: add, subtract, multiply, divide, modulo, minimum, maximum.
job "tpl-math" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      template {
        data        = <<-EOT
          {{ $w := key "app/workers" | parseInt }}
          threads  = {{ multiply $w 2 }}
          spare    = {{ add $w 1 }}
          fewer    = {{ subtract 1 $w }}
          per_core = {{ divide 4 $w }}
          shard    = {{ modulo 3 (env "NOMAD_ALLOC_INDEX" | parseInt) }}
          lo       = {{ minimum $w 8 }}
          hi       = {{ maximum $w 2 }}
        EOT
        destination = "local/math.conf"
      }

    }
  }
}
