# reschedule: exponential delay with an unlimited number of attempts.
job "reschedule-docs" {
  reschedule {
    delay          = "30s"
    delay_function = "exponential"
    max_delay      = "1h"
    unlimited      = true
  }

  group "web" {
    reschedule {
      attempts       = 15
      interval       = "1h"
      delay          = "10s"
      delay_function = "fibonacci"
      max_delay      = "120s"
      unlimited      = false
    }

    task "web" {
      driver = "docker"

      config {
        image = "nginx:1.27"
      }
    }
  }
}
