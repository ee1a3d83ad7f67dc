# template: destinations in the shared alloc dir and with NOMAD_* path variables.
job "tpl-alloc-dir" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      template {
        data        = "shared={{ env \"NOMAD_ALLOC_ID\" }}"
        destination = "${NOMAD_ALLOC_DIR}/shared.conf"
      }

      template {
        data        = "local={{ env \"NOMAD_TASK_NAME\" }}"
        destination = "${NOMAD_TASK_DIR}/local.conf"
      }

      template {
        data        = "secret=1"
        destination = "${NOMAD_SECRETS_DIR}/secret.conf"
      }

    }
  }
}
