# nomadVar reads a Nomad Variable the job's workload identity may read (nomad/jobs/<job>).
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
