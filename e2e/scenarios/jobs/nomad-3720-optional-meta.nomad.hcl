# After hashicorp/nomad#3720 ("Optional meta should really be optional"): a parameterized job whose
# task names an optional meta key the dispatch may leave out. Single-quoted for the shell: only the
# client's interpolation replaces ${NOMAD_META_...}, so what reaches the file is what the client gave.
job "test_meta_optional" {
  type = "batch"

  parameterized {
    payload       = "forbidden"
    meta_required = ["command"]
    meta_optional = ["optional"]
  }

  group "test_meta_optional" {
    restart {
      attempts = 0
      mode     = "fail"
    }

    task "test_meta_optional" {
      driver = "docker"

      config {
        image   = "busybox:1.36"
        command = "sh"
        args    = ["-c", "echo 'command=${NOMAD_META_command}' > /alloc/out.txt; echo 'before ${NOMAD_META_optional} after' >> /alloc/out.txt"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
