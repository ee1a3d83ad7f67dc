"""The e2e harness: remote control, cluster, faults, checkers, waits. Suites import it; it never
imports a suite, and it never provisions: a lab is built once, outside the tests."""
