# template: env for task variables and node attributes.
job "tpl-env" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      template {
        data        = <<-EOT
          alloc_id  = "{{ env "NOMAD_ALLOC_ID" }}"
          alloc_idx = {{ env "NOMAD_ALLOC_INDEX" }}
          node      = "{{ env "node.unique.name" }}"
          dc        = "{{ env "node.datacenter" }}"
          kernel    = "{{ env "attr.kernel.name" }}"
          rack      = "{{ env "meta.rack" }}"
          task_dir  = "{{ env "NOMAD_TASK_DIR" }}"
        EOT
        destination = "local/identity.toml"
      }

    }
  }
}
