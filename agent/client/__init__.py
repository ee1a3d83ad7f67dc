"""The client's loop and what it owns: the core, restore, the offload of blocking steps, a task's runtime
env, check targets."""
