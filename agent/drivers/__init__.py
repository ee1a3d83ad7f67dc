"""Task drivers: how a task's process is started, watched, signalled and stopped."""
