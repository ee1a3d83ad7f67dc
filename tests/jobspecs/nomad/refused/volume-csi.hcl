# A CSI volume per allocation (per_alloc), with mount_options and a propagation mode.
job "csi-db" {
  group "db" {
    count = 2

    volume "data" {
      type            = "csi"
      source          = "db-data"
      read_only       = false
      attachment_mode = "file-system"
      access_mode     = "single-node-writer"
      per_alloc       = true

      mount_options {
        fs_type     = "ext4"
        mount_flags = ["noatime"]
      }
    }

    task "db" {
      driver = "docker"

      config {
        image = "postgres:16"
      }

      volume_mount {
        volume           = "data"
        destination      = "/var/lib/postgresql/data"
        propagation_mode = "private"
        selinux_label    = "Z"
      }
    }
  }
}
