"""The e2e drivers: entry points that run the suites on a lab as subprocesses and judge the runs
(`python -m e2e.drivers.repro`: `make repro`, `fieldlab repro`; `python -m e2e.drivers.shrink`:
`fieldlab e2e shrink`). Like the suites, the harness never imports them."""
