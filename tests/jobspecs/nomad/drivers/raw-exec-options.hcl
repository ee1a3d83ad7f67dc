# raw_exec: args, oom_score_adj, work_dir and cgroup overrides.
job "raw-exec-options" {
  group "g" {
    task "agent" {
      driver = "raw_exec"
      user   = "nobody"

      config {
        command       = "/opt/agent/bin/agent"
        args          = ["-data-dir", "${NOMAD_ALLOC_DIR}/data", "-node", "${node.unique.name}"]
        oom_score_adj = 100
        work_dir      = "/opt/agent"
        cgroup_v1_override = {
          "pids"   = "custom/path"
          "memory" = "custom/path"
        }
      }
    }
  }
}
