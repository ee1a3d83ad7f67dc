# A Connect-native service: the application speaks mTLS itself.
job "native-app" {
  group "g" {
    network {
      mode = "bridge"
      port "api" {}
    }

    service {
      name = "native-api"
      port = "api"
      task = "api"

      connect {
        native = true
      }
    }

    task "api" {
      driver = "docker"

      config {
        image = "hashicorpdev/uuid-api:v5"
        ports = ["api"]
      }
    }
  }
}
