# docker: cpu_hard_limit, cpu_cfs_period, memory_hard_limit, shm_size, ulimit, sysctl, storage_opt.
job "docker-tuning" {
  group "g" {
    task "db" {
      driver = "docker"

      config {
        image             = "postgres:16"
        cpu_hard_limit    = true
        cpu_cfs_period    = 100000
        memory_hard_limit = 2048
        shm_size          = 268435456

        ulimit {
          nofile  = "65536:65536"
          nproc   = "4096"
          memlock = "-1"
        }

        sysctl = {
          "net.core.somaxconn" = "16384"
        }

        storage_opt {
          size = "40G"
        }
      }

      resources {
        cpu    = 1000
        memory = 1024
      }
    }
  }
}
