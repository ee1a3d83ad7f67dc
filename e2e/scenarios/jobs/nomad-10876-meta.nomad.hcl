# After hashicorp/nomad#10876 ("client: interpolate meta blocks with task environment"): a job whose
# meta names runtime values, read by the task from NOMAD_META_*; and an argument that names one
# directly (single-quoted: the shell does not expand it, only the client's interpolation does).
job "meta" {
  meta {
    instance = "${NOMAD_ALLOC_ID}"
  }

  group "app" {
    task "app" {
      driver = "docker"

      config {
        image   = "busybox:1.36"
        command = "sh"
        args    = ["-c", "echo \"meta=$NOMAD_META_instance\" > /alloc/env.txt; echo 'arg=${NOMAD_TASK_NAME}' >> /alloc/env.txt; exec sleep 3600"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
