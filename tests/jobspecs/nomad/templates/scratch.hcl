# template: the scratch store (Set, Get, Key, SetX, MapSet, MapValues).
job "tpl-scratch" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      template {
        data        = <<-EOT
          {{ range service "web" }}
          {{ scratch.MapSet "hosts" .Node .Address }}
          {{ end }}
          {{ scratch.Set "greeting" "hello" }}
          {{ scratch.SetX "greeting" "ignored" }}
          {{ if scratch.Key "greeting" }}{{ scratch.Get "greeting" }}{{ end }}
          {{ range scratch.MapValues "hosts" }}{{ . }}
          {{ end }}
        EOT
        destination = "local/scratch.txt"
      }

    }
  }
}
