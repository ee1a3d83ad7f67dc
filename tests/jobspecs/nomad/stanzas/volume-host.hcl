# A host volume claimed by the group and mounted into the task.
job "mysql-server" {
  group "mysql-server" {
    volume "mysql" {
      type      = "host"
      read_only = false
      source    = "mysql"
    }

    network {
      port "db" {
        static = 3306
      }
    }

    task "mysql-server" {
      driver = "docker"

      volume_mount {
        volume      = "mysql"
        destination = "/var/lib/mysql"
        read_only   = false
      }

      env {
        MYSQL_ROOT_PASSWORD = "password"
      }

      config {
        image = "hashicorp/mysql-portworx-demo:latest"
        args  = ["--datadir", "/var/lib/mysql/data"]
        ports = ["db"]
      }

      resources {
        cpu    = 500
        memory = 1024
      }
    }
  }
}
