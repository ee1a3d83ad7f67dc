"""The e2e suites (pytest modules, one subject each) run against a lab: `make smoke`, `make e2e`.
They import the harness (e2e.harness); the harness never imports them (an import contract in
pyproject.toml forbids `e2e.suites` as a whole, so a new suite is covered without a list)."""
