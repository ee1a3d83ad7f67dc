# A group on a named CNI network, with cni args (Nomad 1.8).
job "cni-net" {
  group "g" {
    network {
      mode = "cni/mynet"

      port "http" {
        to = 8080
      }

      cni {
        args = {
          IgnoreUnknown = "true"
          K8S_POD_NAMESPACE = "default"
        }
      }
    }

    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
        ports = ["http"]
      }
    }
  }
}
