"""The task-level decisions of agent.taskdecisions that the later catalogue entries added: each
fixed answer, and what its fault flag changes (the field bug's mechanism, in one line each)."""

from __future__ import annotations

from agent.bugs import Bugs
from agent.taskdecisions import plan_vault_token_allowed


def test_nomad_19268_a_stopping_alloc_still_gets_vault_tokens_for_its_poststop_tasks() -> None:
    assert plan_vault_token_allowed(alloc_stopping=False) is True
    assert plan_vault_token_allowed(alloc_stopping=True) is True
    bug = Bugs(no_vault_token_after_stop=True)
    assert plan_vault_token_allowed(alloc_stopping=False, bugs=bug) is True
    assert plan_vault_token_allowed(alloc_stopping=True, bugs=bug) is False
