# Runtime interpolation that HCL2 must leave alone: node, attr, meta and NOMAD_* references.
job "runtime-vars" {
  group "g" {
    task "t" {
      driver = "exec"

      config {
        command = "/usr/local/bin/app"
        args = [
          "--node", "${node.unique.name}",
          "--dc", "${node.datacenter}",
          "--class", "${node.class}",
          "--pool", "${node.pool}",
          "--kernel", "${attr.kernel.name}",
          "--rack", "${meta.rack}",
          "--alloc", "${NOMAD_ALLOC_ID}",
          "--region", "${NOMAD_REGION}",
        ]
      }
    }
  }
}
