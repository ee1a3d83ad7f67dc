# plugin runs an arbitrary executable on the client at render time (disabled by default in Nomad).
job "plugin-fn" {
  group "g" {
    task "t" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      template {
        data        = "{{ \"my-value\" | plugin \"/usr/local/bin/encrypt\" }}"
        destination = "local/encrypted.txt"
      }
    }
  }
}
