"""The agent's HTTP API: the mTLS server and its handler threads (`server`, `pool`), streamed and
upgraded answers (`stream`), writes answered once per Idempotency-Key (`idempotency`), views shared
with the CLI (`views`), and the client the CLI, the lab and the e2e harness use (`client`). Nomad's
routes on it are agent.nomadapi."""
