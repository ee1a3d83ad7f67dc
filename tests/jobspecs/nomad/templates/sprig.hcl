# template: sprig functions exposed with the sprig_ prefix.
job "tpl-sprig" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      template {
        data        = <<-EOT
          {{ $list := sprig_list "a" "b" "c" }}
          joined = "{{ sprig_join "-" $list }}"
          upper  = "{{ sprig_upper "abc" }}"
          def    = "{{ sprig_default "fallback" (env "UNSET_VAR") }}"
          uuid   = "{{ sprig_uuidv4 }}"
        EOT
        destination = "local/sprig.txt"
      }

    }
  }
}
