"""Workloads: programs that run inside tasks (as exec tasks from the agent's venv, or as the program of
a workload image such as fieldlab/probe), never as part of the agent.

A workload never imports the agent's runtime (agent.client.core, agent.allocrunner, agent.network, ...):
each one depends on the standard library only, so that it runs on a bare interpreter in its image.
"""
