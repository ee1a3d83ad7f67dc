# After hashicorp/nomad#10572 ("drivers/docker+exec+java: disable net_raw capability by default"): a
# docker task that asks for no capability notes whether it may open raw sockets (CAP_NET_RAW, bit 13
# of its effective set): what ARP spoofing between the tasks of a bridge needs.
job "netraw" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image   = "busybox:1"
        command = "sh"
        args    = ["-c", "while read k v; do [ \"$k\" = CapEff: ] && echo \"net_raw=$(( (0x$v >> 13) & 1 ))\"; done < /proc/self/status > /alloc/caps.txt; exec sleep 3600"]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
