# exec: the cgroup_v2_override option.
job "exec-cgroups" {
  group "g" {
    task "t" {
      driver = "exec"

      config {
        command            = "/usr/bin/stress-ng"
        args               = ["--cpu", "1", "--timeout", "60s"]
        cgroup_v2_override = "custom.slice/stress.scope"
      }
    }
  }
}
