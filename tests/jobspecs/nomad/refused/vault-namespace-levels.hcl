# vault at job and group level, merged into each task; namespace and allow_token_expiration.
job "vault-levels" {
  vault {
    policies = ["common"]
  }

  group "g" {
    vault {
      namespace              = "engineering"
      allow_token_expiration = true
    }

    task "a" {
      driver = "docker"

      config {
        image = "example/a:1"
      }
    }

    task "b" {
      driver = "exec"

      config {
        command = "/usr/local/bin/b"
      }

      vault {
        policies    = ["b-only"]
        change_mode = "restart"
      }
    }
  }
}
