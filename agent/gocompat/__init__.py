"""Go's behaviour where Nomad's users meet it (RE2 regexps, hashicorp/go-version)."""
