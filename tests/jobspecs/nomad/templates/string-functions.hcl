# template: split, join, trimSpace, toLower, toUpper, toTitle, replaceAll, regexReplaceAll.
job "tpl-strings" {
  group "app" {
    task "app" {
      driver = "docker"

      config {
        image = "example/app:1.0"
      }

      template {
        data        = <<-EOT
          {{ $hosts := key "app/hosts" | split "," }}
          hosts   = [{{ range $i, $h := $hosts }}{{ if $i }}, {{ end }}"{{ $h | trimSpace }}"{{ end }}]
          joined  = "{{ join ";" $hosts }}"
          lower   = "{{ key "app/name" | toLower }}"
          upper   = "{{ key "app/name" | toUpper }}"
          title   = "{{ key "app/name" | toTitle }}"
          dashed  = "{{ key "app/name" | replaceAll "_" "-" }}"
          cleaned = "{{ key "app/name" | regexReplaceAll "[^a-z0-9]" "" }}"
          {{ if key "app/name" | regexMatch "^svc-" }}prefixed = true{{ end }}
          trimmed = "{{ "  padded  " | trimSpace }}"
        EOT
        destination = "local/strings.toml"
      }

    }
  }
}
