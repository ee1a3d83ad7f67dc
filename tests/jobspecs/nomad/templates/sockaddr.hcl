# template: sockaddr (go-sockaddr templates) to find the private IP.
job "tpl-sockaddr" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      template {
        data        = <<-EOT
          bind_addr = "{{ sockaddr "GetPrivateIP" }}"
          all       = "{{ sockaddr "GetAllInterfaces | include \"flags\" \"forwardable\" | join \"address\" \" \"" }}"
        EOT
        destination = "local/bind.hcl"
      }

    }
  }
}
