"""Artifacts (Nomad's getter): a task's `artifact` blocks fetched into its task dir before its first
start. `plan` is pure (what to fetch, how to check and unpack it, whether a host is allowed);
`fetch` downloads over http(s) from allowed hosts only, with limits; `unpack` writes a download or
an archive's members into the task's sandbox without following links."""
