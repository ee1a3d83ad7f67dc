"""The node the agent runs on: what it is and offers (`nodeinfo`: fingerprint, node ID; `placement`:
whether a job's constraints, datacenters, drivers and volumes fit it), and what the agent keeps
clean on it (`sweeper`: orphans of allocs that are gone; `gc`: terminal allocs by Nomad's GC
rules)."""
