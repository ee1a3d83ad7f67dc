"""logmon: the process that copies a task's stdout and stderr into rotated files, as Nomad's
client/logmon does (`python -m agent.logmon`, started by agent.runner.logmonhook)."""
