# A Consul service with tags, meta, enable_tag_override and tagged_addresses.
job "consul-service" {
  group "web" {
    network {
      port "http" {
        to = 80
      }
    }

    service {
      name                = "web"
      port                = "http"
      tags                = ["urlprefix-/web", "v1"]
      enable_tag_override = true
      address_mode        = "auto"

      meta {
        version = "1.0"
        alloc   = "${NOMAD_ALLOC_ID}"
      }

      canary_meta {
        version = "1.1-canary"
      }

      tagged_addresses {
        lan = "${NOMAD_HOST_IP_http}"
      }

      check {
        type     = "http"
        path     = "/"
        interval = "10s"
        timeout  = "2s"
      }
    }

    task "nginx" {
      driver = "docker"

      config {
        image = "nginx:1.27"
        ports = ["http"]
      }
    }
  }
}
