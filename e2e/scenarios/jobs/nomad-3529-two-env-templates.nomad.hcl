# After hashicorp/nomad#3529 ("template: Fix issue where multiple environment variable templates
# would be parsed incorrectly when contents of one have changed after the initial rendering", 0.7.1):
# a task whose environment comes from two env templates, a static setting and a certificate serial
# issued anew when the client restarts.
job "envs" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image   = "alpine:3.6"
        command = "sh"
        args    = ["-c", "echo \"greeting=$GREETING serial=$SERIAL\"; while true; do sleep 1; done"]
      }

      vault {
        policies = ["envs-app"]
      }

      template {
        data        = "GREETING={{ with secret \"secret/data/fieldlab/shared\" }}{{ .Data.data.greeting | replaceAll \" \" \"_\" }}{{ end }}\n"
        destination = "secrets/greeting.env"
        env         = true
      }

      template {
        data        = "SERIAL={{ with secret \"pki_int/issue/fieldlab-workload\" \"common_name=envs.service.fieldlab\" \"ttl=1h\" }}{{ .Data.serial_number }}{{ end }}\n"
        destination = "secrets/cert.env"
        env         = true
        change_mode = "restart"
      }
    }
  }
}
