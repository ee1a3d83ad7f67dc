"""Workload identity: the JWTs the agent signs for its tasks (Nomad's `identity` blocks).

- `keyring`: the agent's signing key (RSA, RS256 as Nomad's), made once and kept in the data dir
  (0600), and its public half as a JWKS (`/.well-known/jwks.json`);
- `claims`: what a task's token says (pure: Nomad's workload identity claims).

The task side (the files and variables a task gets) is the task runner's identity hook
(agent.runner.identityhook).
"""
