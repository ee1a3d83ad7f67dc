# HCL2 hash and UUID functions: md5, sha1, sha256, sha512, uuidv5.
locals {
  seed = "billing-service"
}

job "fn-hash" {
  meta {
    md5    = md5(local.seed)
    sha1   = sha1(local.seed)
    sha256 = sha256(local.seed)
    sha512 = sha512(local.seed)
    id     = uuidv5("dns", "billing.example.com")
  }

  group "g" {
    task "t" {
      driver = "exec"

      config {
        command = "/bin/true"
      }
    }
  }
}
