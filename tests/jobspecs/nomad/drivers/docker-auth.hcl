# docker: private registry auth, force_pull and image_pull_timeout.
job "docker-auth" {
  group "g" {
    task "private" {
      driver = "docker"

      config {
        image              = "registry.example.com/team/private-app:3.2.1"
        force_pull         = true
        image_pull_timeout = "10m"
        auth_soft_fail     = true

        auth {
          username       = "deploy"
          password       = "not-a-real-password"
          server_address = "registry.example.com"
        }
      }
    }
  }
}
