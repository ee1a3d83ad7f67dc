# meta at job, group and task level; task meta interpolates and overrides.
job "meta-docs" {
  meta {
    my-key  = "my-value"
    env-tag = "prod"
  }

  group "g" {
    meta {
      my-key = "group-value"
    }

    task "t" {
      driver = "exec"

      meta {
        my-key    = "task-value"
        node_name = "${node.unique.name}"
      }

      config {
        command = "/bin/sh"
        args    = ["-c", "echo $NOMAD_META_my_key; sleep 600"]
      }
    }
  }
}
