# nomadVarList and nomadVarExists: nomad/jobs/<job>/flags is not readable without an ACL policy.
job "nomadvarlist" {
  group "g" {
    task "t" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      template {
        data        = <<-EOT
          {{ if nomadVarExists "nomad/jobs/nomadvarlist/flags" }}
          {{ range nomadVarList "nomad/jobs" }}{{ .Path }}
          {{ end }}
          {{ end }}
        EOT
        destination = "local/vars.txt"
      }
    }
  }
}
