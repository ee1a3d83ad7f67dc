# After hashicorp/nomad#13748 ("workload identity: use parent ID for dispatch/periodic jobs") and
# #23902 (the `sub` claim): a dispatched job's task reads the claims of its own workload identity
# (NOMAD_TOKEN: the JWT's middle part, base64url without padding, decoded by busybox).
job "ident" {
  type = "batch"

  parameterized {}

  group "g" {
    task "t" {
      driver = "docker"

      identity {
        env = true
      }

      config {
        image   = "busybox:1.36"
        command = "sh"
        args = ["-c", <<EOS
p=$(printf %s "$NOMAD_TOKEN" | cut -d. -f2 | tr '_-' '/+')
n=$(printf %s "$p" | wc -c | tr -d " ")
while [ $((n % 4)) -ne 0 ]; do p="$p="; n=$((n + 1)); done
printf %s "$p" | base64 -d > /alloc/claims.json
echo >> /alloc/claims.json
EOS
        ]
      }

      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
