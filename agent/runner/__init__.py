"""One allocation's life on this node, shaped as Nomad's client: the alloc runner (`alloc`) with a
task runner per task (`taskrunner`) and its hooks (`hooks`), the lifecycle order (`coordinator`), the
network (`network`), the restore (`restorer`), the kills (`kill`), and the small rooms they use: the
records in the state store (`state`), the API view (`view`), Consul registration (`services`), the
task directories (`taskdirs`), logmon (`logmonhook`), the Vault token (`vaulttoken`). The runner
knows drivers and networks only by their protocols."""
