# The java driver: valid Nomad, but fieldlab-agent runs docker, exec and raw_exec only.
job "java-app" {
  group "g" {
    task "app" {
      driver = "java"

      config {
        jar_path    = "local/app.jar"
        jvm_options = ["-Xmx512m", "-Xms256m"]
      }

      artifact {
        source = "https://example.com/app.jar"
      }
    }
  }
}
