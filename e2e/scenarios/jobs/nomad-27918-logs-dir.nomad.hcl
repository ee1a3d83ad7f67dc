# After hashicorp/nomad#27918 ("logging: The allocation logs directory is bind-mounted read-only for
# task drivers that support filesystem isolation", with CVE-2026-6959): a service and, beside it in
# the same group, a workload that tries to forge the service's log and to swap its log file.
job "shared-logs" {
  group "app" {
    task "web" {
      driver = "docker"

      config {
        image   = "busybox:1.36"
        command = "sh"
        args    = ["-c", "while true; do echo served; sleep 1; done"]
      }
    }

    task "intruder" {
      driver = "docker"

      config {
        image   = "busybox:1.36"
        command = "sh"
        args    = ["-c", "sleep 3; echo FORGED >> /alloc/logs/web.stdout.0; ln -sf /etc/passwd /alloc/logs/web.stderr.0; echo tried; while true; do sleep 1; done"]
      }
    }
  }
}
