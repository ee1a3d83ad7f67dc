# docker: the logging block (driver, options).
job "docker-logging" {
  group "g" {
    task "app" {
      driver = "docker"

      config {
        image = "nginx:1.27"

        logging {
          type = "fluentd"
          config {
            fluentd-address = "localhost:24224"
            tag             = "nginx"
          }
        }
      }
    }
  }
}
