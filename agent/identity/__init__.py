"""Workload identity: the JWTs the agent signs for its tasks (Nomad's `identity` blocks).

- `keyring`: the agent's signing key (RSA, RS256 as Nomad's), made once and kept in the data dir
  (0600), and its public half as a JWKS (`/.well-known/jwks.json`);
- `claims`: what a task's token says (pure: Nomad's workload identity claims);
- `vaultlogin`: whether a task's Vault token comes from a JWT login with its Vault identity (Nomad
  1.7+) or from the agent's token role (pure).

The task side (the files and variables a task gets) is the task runner's identity hook
(agent.runner.identityhook).
"""
