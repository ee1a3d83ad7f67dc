# docker: network_mode, hostname, DNS, extra_hosts, network_aliases, mac_address.
job "docker-net" {
  group "g" {
    task "app" {
      driver = "docker"

      config {
        image              = "example/app:1.0"
        network_mode       = "custom-net"
        network_aliases    = ["app", "app-${NOMAD_ALLOC_INDEX}"]
        hostname           = "app-${NOMAD_ALLOC_INDEX}"
        dns_servers        = ["10.0.0.2", "1.1.1.1"]
        dns_search_domains = ["service.consul"]
        dns_options        = ["ndots:2"]
        extra_hosts        = ["db.internal:10.0.0.20"]
        ipv4_address       = "172.28.5.10"
        mac_address        = "02:42:ac:11:00:02"
      }
    }
  }
}
