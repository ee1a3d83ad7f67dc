# After hashicorp/nomad#10511 ("jobspec: Fixed a bug where a negative `cores` value in a task's
# resource block was accepted during job validation and registration"): a task asking for -1 cores,
# as someone meaning "no reserved cores" might write.
job "cruncher" {
  group "work" {
    task "crunch" {
      driver = "docker"

      config {
        image   = "alpine:3.13"
        command = "sh"
        args    = ["-c", "while true; do sleep 1; done"]
      }

      resources {
        cores  = -1
        memory = 128
      }
    }
  }
}
