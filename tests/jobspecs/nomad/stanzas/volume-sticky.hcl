# A dynamic host volume claimed sticky (Nomad 1.10) by an exec task.
job "sticky-vol" {
  group "store" {
    volume "blobs" {
      type            = "host"
      source          = "blobs"
      sticky          = true
      access_mode     = "single-node-single-writer"
      attachment_mode = "file-system"
    }

    task "store" {
      driver = "exec"

      config {
        command = "/usr/local/bin/blobstore"
        args    = ["--root", "/srv/blobs"]
      }

      volume_mount {
        volume      = "blobs"
        destination = "/srv/blobs"
      }
    }
  }
}
