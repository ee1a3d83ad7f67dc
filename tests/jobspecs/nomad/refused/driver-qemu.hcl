# The qemu driver: a VM image; not a driver fieldlab-agent runs.
job "vm" {
  group "g" {
    task "vm" {
      driver = "qemu"

      config {
        image_path  = "local/linux.img"
        accelerator = "kvm"
        args        = ["-nodefaults", "-nodefconfig"]
      }

      artifact {
        source = "https://example.com/linux.img"
      }
    }
  }
}
