"""The node the agent runs on: what it is (`nodeinfo`: fingerprint, node ID, drivers' health), and
what the agent keeps clean on it (`sweeper`: orphans of allocs that are gone; `gc`: terminal allocs
by Nomad's GC rules). Whether a job fits the node is agent.decide.placement (pure, used by the jobspec)."""
