# tcp and grpc checks, initial_status, success_before_passing and failures_before_critical.
job "check-kinds" {
  group "svc" {
    network {
      port "grpc" {
        to = 9090
      }
      port "admin" {
        to = 9091
      }
    }

    service {
      name = "greeter"
      port = "grpc"

      check {
        type                     = "grpc"
        port                     = "grpc"
        grpc_service             = "helloworld.Greeter"
        grpc_use_tls             = false
        interval                 = "5s"
        timeout                  = "1s"
        initial_status           = "warning"
        success_before_passing   = 2
        failures_before_critical = 3
      }

      check {
        name     = "admin-port"
        type     = "tcp"
        port     = "admin"
        interval = "15s"
        timeout  = "3s"
      }
    }

    task "greeter" {
      driver = "docker"

      config {
        image = "example/greeter:0.4"
        ports = ["grpc", "admin"]
      }
    }
  }
}
