"""A job's namespace.

The agent serves one namespace, "default" (agent.nomadapi.http): a job naming another is refused
here, as the API refuses it, rather than run in "default" under a name it did not ask for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.jobspec.reader import short
from agent.jobspec.tree import Body, join

if TYPE_CHECKING:
    from agent.jobspec.reader import BodyReader

NAMESPACE = "default"


def read_namespace(builder: BodyReader, body: Body, path: str) -> None:
    """The job's `namespace`: only "default" (or none) is served."""
    ns = builder._str(body, "namespace", path)
    if ns and ns != NAMESPACE:
        builder.report.error(
            join(path, "namespace"),
            f'namespace "{short(ns)}" not found: this agent serves only the "{NAMESPACE}" namespace',
        )
