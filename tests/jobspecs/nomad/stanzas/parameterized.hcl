# parameterized batch job with optional payload and meta (job-specification/parameterized).
job "dispatch-docs" {
  type = "batch"

  parameterized {
    payload       = "optional"
    meta_required = ["dispatcher_email"]
    meta_optional = ["pager_email"]
  }

  meta {
    pager_email = "oncall@example.com"
  }

  group "summarize" {
    task "report" {
      driver = "exec"

      config {
        command = "/usr/local/bin/summarize"
        args    = ["--to", "${NOMAD_META_dispatcher_email}"]
      }

      dispatch_payload {
        file = "input.txt"
      }
    }
  }
}
