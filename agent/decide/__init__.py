"""The pure decisions over plain data, by subject (the alloc, the task, placement, job updates, lifecycle
order)."""
