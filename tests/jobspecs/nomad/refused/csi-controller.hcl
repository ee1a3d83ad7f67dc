# The controller half of a CSI plugin.
job "plugin-aws-ebs-controller" {
  group "controller" {
    task "plugin" {
      driver = "docker"

      config {
        image = "public.ecr.aws/ebs-csi-driver/aws-ebs-csi-driver:v1.30.0"
        args  = ["controller", "--endpoint=unix://csi/csi.sock", "--logtostderr"]
      }

      csi_plugin {
        id        = "aws-ebs0"
        type      = "controller"
        mount_dir = "/csi"
      }
    }
  }
}
