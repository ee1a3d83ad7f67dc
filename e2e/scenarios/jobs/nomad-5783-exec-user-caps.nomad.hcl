# After hashicorp/nomad#5783 ("CVE-2019-12618: Privilege Escalation in 0.9.0, 0.9.1"): an exec task
# of the default user (nobody) that asks for no capability notes the effective capabilities its
# process has: none, or every one (setuid to root, escape the chroot, kill the node's processes).
job "nobodycaps" {
  group "app" {
    task "app" {
      driver = "exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "grep CapEff /proc/self/status > ${NOMAD_ALLOC_DIR}/caps.txt 2>&1; exec sleep 3600"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
