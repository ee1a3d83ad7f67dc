# nomadVar reads a Nomad Variable from the Nomad servers; the agent has no server to ask.
job "nomadvar" {
  group "g" {
    task "t" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      template {
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/nomadvar" }}
          DB_PASSWORD={{ .db_password }}
          {{ end }}
        EOT
        destination = "secrets/db.env"
        env         = true
      }
    }
  }
}
