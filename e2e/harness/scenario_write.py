"""Writing a scenario file (pure): the YAML the repository's linters take (the shrinker's minimal
schedule, e2e/shrink.py) and a new report's skeleton with the images its jobspec names
(`fieldlab repro new`, e2e/repro.py). Reading and judging one is e2e/harness/scenario.py."""

from __future__ import annotations

import re
from typing import Any

import yaml

from e2e.harness.scenario import FAMILIES


# -- writing a scenario ----------------------------------------------------------------------------------
class _Dumper(yaml.SafeDumper):
    """Lists indented under their key, as the repository's yamllint wants them."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def dump(doc: dict[str, Any]) -> str:
    """A scenario as YAML the repository's linters accept: a document start, lists indented."""
    return "---\n" + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=100, allow_unicode=True)


# -- a new scenario's skeleton ------------------------------------------------------------------------
SKELETON = """\
---
# {bug}: fill in every field, then `fieldlab repro {path}` (in e2e/scenarios/ it is a catalogue
# entry: make repro BUG={bug}). The vocabulary of steps and checks: docs/field-bugs.md.
bug: {bug}
title: "the report's title"
link: https://github.com/hashicorp/nomad/issues/{number}
versions: "the Nomad versions the report names"
family: restore   # {families}
flag: the-agent-fault-flag   # agent/faults.py; a new bug needs a new flag (a Bugs field)
symptom: "a regex of the failure message that shows the field symptom"
what: "the field symptom in one line, as the report words it"
jobspec: {jobspec}
images:   # the report's image -> a lab image (no registry here); reported as a substitution
{images}steps:
  - run
  - wait: {{alloc: running, timeout: 90}}
  - agent_restart: SIGTERM
checks:
  - alloc: running
  - invariants
"""


def skeleton(bug: str, jobspec_name: str, images: list[str], path: str = "") -> str:
    number = bug.split("-")[1] if "-" in bug else "NUMBER"
    lines = "".join(f'  "{i}": fieldlab/busybox:latest\n' for i in images)
    return SKELETON.format(
        bug=bug,
        path=path or f"e2e/scenarios/{bug}.yml",
        number=number,
        families=" | ".join(FAMILIES),
        jobspec=jobspec_name,
        images=lines or "  {}\n",
    )


IMAGE_LINE = re.compile(r'^\s*image\s*=\s*"([^"$]+)"', re.MULTILINE)


def images_in(jobspec: str) -> list[str]:
    """The literal images a jobspec names (for the skeleton's map)."""
    return sorted(set(IMAGE_LINE.findall(jobspec)))
