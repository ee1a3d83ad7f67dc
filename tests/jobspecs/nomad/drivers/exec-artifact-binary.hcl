# exec: run a binary downloaded by an artifact, path relative to the task dir.
job "exec-artifact" {
  group "g" {
    task "consul-esm" {
      driver = "exec"

      artifact {
        source      = "https://releases.hashicorp.com/consul-esm/0.7.2/consul-esm_0.7.2_linux_amd64.zip"
        destination = "local/bin"
      }

      config {
        command = "local/bin/consul-esm"
        args    = ["-config-file", "local/esm.hcl"]
      }

      template {
        data        = "log_level = \"INFO\"\nconsul_service = \"consul-esm\"\n"
        destination = "local/esm.hcl"
      }
    }
  }
}
