"""Writing a scenario file (pure): the YAML the repository's linters take (the shrinker's minimal
schedule, e2e/drivers/shrink.py) and a new report's skeleton with the images its jobspec names
(`fieldlab repro new`, e2e/drivers/repro.py). Reading and judging one is e2e/harness/scenario.py."""

from __future__ import annotations

import re
from typing import Any

import yaml

from e2e.harness import scenario_jobspec
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
HEAD_OWN = """\
---
# {bug}: fill in from the report, then run it:
#   fieldlab repro {path}
# It runs once on the lab's agent (TARGET=nomad: on a Nomad cluster) and says PRESENT (the symptom
# showed) or ABSENT. With a `flag` that puts the bug back in the agent it runs twice instead:
# REPRODUCED with it, FIXED without. The vocabulary of steps and checks: docs/field-bugs.md.
bug: {bug}
title: "the report's title"
{link}# versions: "the Nomad versions the report names"
# family: restore   # {families}
# flag: an-agent-fault-flag   # agent/fieldbugs/catalogue.py (make repro BUG=list)
"""
HEAD_CATALOGUE = """\
---
# {bug}: fill in every field, then `make repro BUG={bug}` (a catalogue entry: until its flag is
# filled in, the catalogue does not load). The vocabulary of steps and checks: docs/field-bugs.md.
bug: {bug}
title: "the report's title"
{link}versions: "the Nomad versions the report names"
family: restore   # {families}
flag: the-agent-fault-flag   # agent/fieldbugs/catalogue.py; a new bug needs a new flag (a Bugs field)
"""
BODY = """\
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


def skeleton(
    bug: str, jobspec_name: str, images: list[str], path: str = "", link: str = "", catalogue: bool = False
) -> str:
    """A new report's scenario to fill in: flagless (run once, PRESENT or ABSENT) for a directory of
    one's own; with every catalogue field for e2e/scenarios/. `link`: the report's URL ("": a
    nomad-<n> id's GitHub issue, else none)."""
    number = re.fullmatch(r"nomad-([0-9]+)", bug)
    link = link or (f"https://github.com/hashicorp/nomad/issues/{number.group(1)}" if number else "")
    link_line = f"link: {link}\n" if link else "# link: where the report is (optional)\n"
    head = HEAD_CATALOGUE if catalogue else HEAD_OWN
    lines = "".join(f'  "{i}": fieldlab/busybox:latest\n' for i in images)
    return head.format(
        bug=bug,
        path=path or f"e2e/scenarios/{bug}.yml",
        families=" | ".join(FAMILIES),
        link=link_line,
    ) + BODY.format(jobspec=jobspec_name, images=lines or "  {}\n")


def images_in(jobspec: str) -> list[str]:
    """The literal images a jobspec names (for the skeleton's map): HCL2 or JSON."""
    return scenario_jobspec.images_in(jobspec)
