# After hashicorp/nomad#1977 ("Change relative path from joining against the alloc dir to the task's
# directory"): a docker task binds the config its template rendered into local/ with a relative
# `volumes` path, as Nomad's docker driver docs show, and notes what it reads there.
job "relconf" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image   = "busybox:1"
        command = "sh"
        args    = ["-c", "cat /etc/app/app.conf > /alloc/seen.txt 2>&1; exec sleep 3600"]
        volumes = ["local/conf:/etc/app"]
      }

      template {
        data        = "greeting=hello\n"
        destination = "local/conf/app.conf"
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
