"""One allocation's life on this node (`alloc.AllocRunner`) and the small rooms it uses: its
records in the state store (`state`), the API view (`view`), Consul registration (`services`) and
the task directories (`taskdirs`). The runner knows drivers and networks only by their protocols."""
