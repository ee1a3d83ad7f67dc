# service check of type http with method, header, body, protocol and tls_skip_verify.
job "check-http" {
  group "api" {
    network {
      port "http" {}
    }

    service {
      name = "api"
      port = "http"

      check {
        name            = "api-health"
        type            = "http"
        path            = "/v1/health"
        method          = "POST"
        body            = "{\"check\":\"full\"}"
        protocol        = "https"
        tls_skip_verify = true
        interval        = "10s"
        timeout         = "2s"
        header {
          Authorization = ["Basic ZWxhc3RpYzpjaGFuZ2VtZQ=="]
          Content-Type  = ["application/json"]
        }
      }
    }

    task "api" {
      driver = "docker"

      config {
        image = "example/api:2.1"
        ports = ["http"]
      }
    }
  }
}
