# After hashicorp/nomad#7271 ("Allow shutdown_delay to execute regardless of service registration",
# from the report #7251): a task with a shutdown_delay and no service block of its own (its
# services, if any, at the group's level) is killed at once when the job stops.
job "drain" {
  group "web" {
    task "app" {
      driver         = "docker"
      shutdown_delay = "8s"
      kill_timeout   = "3s"

      config {
        image = "hashicorp/http-echo:0.2.3"
        args  = ["-listen", ":8080", "-text", "hello"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
