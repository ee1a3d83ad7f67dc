# After hashicorp/nomad#26800 (fixed by PR 26880, "client: Fix unique identifiers for templates with
# same content"): a task whose two templates read the same secret with the same text, into two
# destinations (the config its two processes each load from their own path).
job "twins" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image   = "alpine:3.20"
        command = "sh"
        args    = ["-c", "cat local/a.conf local/b.conf; while true; do sleep 1; done"]
      }

      vault {
        policies = ["twins-kv"]
      }

      template {
        data        = "{{ with secret \"secret/data/fieldlab/shared\" }}greeting={{ .Data.data.greeting }}{{ end }}\n"
        destination = "local/a.conf"
      }

      template {
        data        = "{{ with secret \"secret/data/fieldlab/shared\" }}greeting={{ .Data.data.greeting }}{{ end }}\n"
        destination = "local/b.conf"
      }
    }
  }
}
