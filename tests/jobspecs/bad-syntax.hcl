job "broken" {
  group "web" {
    task "http" {
      driver = "docker"
      config {
        image = "fieldlab/busybox:latest"
      }
    }
  # the group is never closed
}
