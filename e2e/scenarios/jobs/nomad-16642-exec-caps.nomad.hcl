# After hashicorp/nomad#16642 ("The `exec` driver is mishandling capabilities on Linux"): an exec task
# (the default user, not root) that drops every capability and adds back net_bind_service, as the
# report's, notes the effective capabilities its process has (0x400: net_bind_service).
job "captest" {
  group "app" {
    task "app" {
      driver = "exec"

      config {
        command  = "/bin/sh"
        args     = ["-c", "grep CapEff /proc/self/status > ${NOMAD_ALLOC_DIR}/caps.txt 2>&1; exec sleep 3600"]
        cap_drop = ["all"]
        cap_add  = ["net_bind_service"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
