# After hashicorp/nomad#10663 ("Exec/Java: Default OOMScoreAdjust causes memory limit to be
# ignored"): an exec task on a client whose agent runs as Nomad's packaged unit runs it
# (OOMScoreAdjust=-1000) notes the oom_score_adj it was given: -1000 is a task the OOM killer can
# never pick, so its cgroup's memory limit is not enforced.
job "oomscore" {
  group "app" {
    task "app" {
      driver = "exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "cat /proc/self/oom_score_adj > ${NOMAD_ALLOC_DIR}/oom.txt 2>&1; exec sleep 3600"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
