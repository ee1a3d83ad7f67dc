# exec: pid_mode, ipc_mode, cap_add/cap_drop, work_dir.
job "exec-isolation" {
  group "g" {
    task "tool" {
      driver = "exec"

      config {
        command  = "/bin/bash"
        args     = ["-c", "ps aux; sleep 300"]
        pid_mode = "private"
        ipc_mode = "private"
        cap_add  = ["net_raw"]
        cap_drop = ["all"]
        work_dir = "/local"
      }
    }
  }
}
