# After hashicorp/nomad#28190 ("docker: Enforce allowed_modes or allow_privileged requirement to set
# host namespace modes in task", CVE-2026-14891): a workload that asks for the node's pid namespace
# without any privilege, and looks at what it can see there.
job "peek" {
  group "peek" {
    task "peek" {
      driver = "docker"

      config {
        image    = "alpine:3.20"
        pid_mode = "host"
        command  = "sh"
        args     = ["-c", "echo pid1=$(cat /proc/1/comm); echo procs=$(ls /proc | grep -c '^[0-9]'); while true; do sleep 1; done"]
      }
    }
  }
}
