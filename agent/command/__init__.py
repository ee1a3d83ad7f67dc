"""The daemon: its config, wiring, process set-up and the log reader (Nomad's command/agent)."""
