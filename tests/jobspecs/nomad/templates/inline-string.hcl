# template: data as a one-line quoted string with escaped quotes and \n.
job "tpl-inline" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      template {
        data        = "addr={{ env \"NOMAD_IP_http\" }}\nport={{ env \"NOMAD_PORT_http\" }}\n"
        destination = "local/addr.txt"
      }

      template {
        data        = "static content, no actions"
        destination = "local/static.txt"
      }

    }
  }
}
