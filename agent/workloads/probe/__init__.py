"""The probe workload the e2e suites assert through (see probe.py; it is also the image's program)."""
