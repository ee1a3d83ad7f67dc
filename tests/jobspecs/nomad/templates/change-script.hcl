# template: change_mode script with a change_script block.
job "tpl-change-script" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      template {
        data        = "{{ key \"app/feature_flags\" }}"
        destination = "local/flags.json"
        change_mode = "script"

        change_script {
          command       = "/usr/local/bin/reload"
          args          = ["--flags", "/local/flags.json"]
          timeout       = "5s"
          fail_on_error = false
        }
      }

    }
  }
}
