# After hashicorp/nomad#1830 ("driver/docker: Fix local/ directory mount into container", 0.4.1): a
# docker task that reads the config its template wrote into local/, as the template docs show.
job "configured" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image   = "alpine:3.4"
        command = "sh"
        args    = ["-c", "cat /local/app.conf; echo started; while true; do sleep 1; done"]
      }

      template {
        data        = "listen={{ env \"NOMAD_ALLOC_ID\" | len }}\n"
        destination = "local/app.conf"
      }
    }
  }
}
