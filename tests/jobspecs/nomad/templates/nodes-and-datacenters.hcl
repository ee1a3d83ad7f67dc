# template: datacenters, nodes, node and connect/caRoots helpers.
job "tpl-nodes" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      template {
        data        = <<-EOT
          {{ range datacenters }}dc: {{ . }}
          {{ end }}
          {{ range nodes }}{{ .Node }} {{ .Address }}
          {{ end }}
          {{ with node }}this node: {{ .Node.Node }}{{ end }}
          {{ range caRoots }}{{ .RootCertPEM }}{{ end }}
        EOT
        destination = "local/topology.txt"
      }

    }
  }
}
