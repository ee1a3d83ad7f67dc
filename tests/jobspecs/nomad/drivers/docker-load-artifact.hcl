# docker: load an image tarball fetched by an artifact.
job "docker-load" {
  group "g" {
    task "app" {
      driver = "docker"

      artifact {
        source = "https://artifacts.example.com/images/app-1.0.tar"
        options {
          archive = false
        }
      }

      config {
        load  = "app-1.0.tar"
        image = "example/app:1.0"
      }
    }
  }
}
