# HCL2 encoding functions: jsonencode, jsondecode, yamlencode, yamldecode, base64encode,
# base64decode, csvdecode, urlencode.
locals {
  settings = {
    workers = 4
    debug   = false
    peers   = ["a", "b"]
  }
  users = csvdecode("name,role\nalice,admin\nbob,dev\n")
  yaml  = yamldecode("port: 8080\nhost: 0.0.0.0\n")
}

job "fn-encoding" {
  group "g" {
    task "t" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      env {
        SETTINGS_JSON = jsonencode(local.settings)
        SETTINGS_YAML = yamlencode(local.settings)
        PORT          = format("%d", local.yaml.port)
        FIRST_USER    = local.users[0].name
        TOKEN_B64     = base64encode("user:pass")
        PLAIN         = base64decode("aGVsbG8=")
        WORKERS       = format("%d", jsondecode("{\"n\": 4}").n)
        QUERY         = urlencode("a b&c=d")
      }
    }
  }
}
