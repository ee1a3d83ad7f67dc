# datacenters accepts glob patterns; "*" is the default since Nomad 1.5.
job "wildcard-dc" {
  datacenters = ["us-east-*", "eu-*"]
  type        = "batch"

  group "once" {
    task "hello" {
      driver = "exec"

      config {
        command = "/bin/echo"
        args    = ["hello from", "${node.datacenter}"]
      }
    }
  }
}
