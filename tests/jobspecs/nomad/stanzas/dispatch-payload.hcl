# A parameterized batch job whose payload lands in a file (dispatch_payload).
job "video-encode" {
  type = "batch"

  parameterized {
    payload       = "required"
    meta_required = ["input_url"]
    meta_optional = ["profile"]
  }

  group "encode" {
    task "ffmpeg" {
      driver = "docker"

      config {
        image = "jrottenberg/ffmpeg:6.1-alpine"
        args  = ["-i", "${NOMAD_META_input_url}", "-preset", "${NOMAD_META_profile}", "local/out.mp4"]
      }

      dispatch_payload {
        file = "config.json"
      }
    }
  }
}
