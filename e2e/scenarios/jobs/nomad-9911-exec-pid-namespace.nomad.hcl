# After hashicorp/nomad#9911 ("`exec` and `java` do not isolate into PID/IPC namespaces",
# CVE-2021-3283): an exec task looks through /proc for the node's processes; the client agent's
# command line is the one it should never see ('fieldlab-agen[t]' so that it does not find itself).
job "pidpeek" {
  group "app" {
    task "app" {
      driver = "exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "echo agent=$(grep -l 'fieldlab-agen[t]' /proc/[0-9]*/cmdline 2>/dev/null | wc -l) > ${NOMAD_ALLOC_DIR}/procs.txt; exec sleep 3600"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
