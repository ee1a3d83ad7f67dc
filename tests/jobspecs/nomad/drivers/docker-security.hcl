# docker: capabilities, security_opt, readonly_rootfs, privileged off, userns, init.
job "docker-hardened" {
  group "g" {
    task "app" {
      driver = "docker"

      config {
        image           = "example/app:1.0"
        cap_add         = ["net_bind_service"]
        cap_drop        = ["all"]
        security_opt    = ["no-new-privileges"]
        readonly_rootfs = true
        privileged      = false
        init            = true
        userns_mode     = "host"
        pids_limit      = 200
        oom_score_adj   = 500
        group_add       = ["audio"]
      }

      user = "1000:1000"
    }
  }
}
