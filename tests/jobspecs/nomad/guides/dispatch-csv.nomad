# Parameterized jobs guide: dispatch a payload and process it with a templated script.
job "chart-maker" {
  type = "batch"

  parameterized {
    payload       = "required"
    meta_required = ["chart_name"]
  }

  group "chart" {
    task "make" {
      driver = "docker"

      config {
        image   = "python:3.12-slim"
        command = "python3"
        args    = ["local/make_chart.py", "local/data.csv", "${NOMAD_META_chart_name}"]
      }

      dispatch_payload {
        file = "data.csv"
      }

      template {
        destination = "local/make_chart.py"
        data        = <<-EOT
          import csv, sys
          rows = list(csv.reader(open(sys.argv[1])))
          print(f"{sys.argv[2]}: {len(rows)} rows (alloc {{ env "NOMAD_ALLOC_ID" }})")
        EOT
      }
    }
  }
}
