# vault with legacy policies, change_mode signal and env (job-specification/vault).
job "vault-policies" {
  group "g" {
    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      vault {
        policies      = ["cdn", "frontend"]
        change_mode   = "signal"
        change_signal = "SIGUSR1"
        env           = true
      }
    }
  }
}
