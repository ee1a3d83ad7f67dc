"""A scenario's names, checked (pure): the report's id, its link, and the agent fault flag.

- A report of one's own (a scenario file anywhere but the catalogue) is named by any id
  `[a-z0-9][a-z0-9._-]*` (an incident note, a forum thread, a vendor ticket), or by the URL of the
  report, from which the id is taken: `<repo>-<n>` for a GitHub issue or pull request
  (github.com/hashicorp/nomad/issues/5883 -> nomad-5883), else the URL's last path segment. Its
  `link` is optional (the URL, when the id was one).
- A catalogue entry (e2e/scenarios/) keeps the stricter form: `nomad-<issue number>` (a suffix for a
  second entry of one issue, `nomad-12216-orphans`) with its public Nomad issue or pull request as
  `link`, or `fieldlab-<n>` for a bug of this project's own history.
- A fault flag is one the agent implements (agent/fieldbugs/catalogue.py), several joined by commas;
  an unknown one is named with the closest known ones (difflib), never the whole list. `none` (or no
  `flag`) is a scenario without one: it runs once, PRESENT or ABSENT.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from urllib.parse import unquote, urlsplit

REPORT_ID = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
MAX_ID = 80  # an id names files and run directories
CATALOGUE_ID = re.compile(r"^(nomad|fieldlab)-[0-9]+(-[a-z0-9-]+)?$")
NOMAD_LINK = re.compile(r"^https://github\.com/hashicorp/nomad/(issues|pull)/[0-9]+/?$")
GITHUB_ITEM = re.compile(r"^/([^/]+)/([^/]+)/(issues|pull|pulls|discussions)/([0-9]+)(/|$)")
NO_FLAG = ("", "none")


class IdError(ValueError):
    """A report id, link or flag that cannot be taken: the message says what would be."""


def report_id(text: str) -> tuple[str, str]:
    """(the id, the link it came from or "") of a report named by `text`: an id as it is, or a
    URL of the report. IdError says why neither."""
    given = text.strip()
    if "://" not in given:
        if not REPORT_ID.match(given) or len(given) > MAX_ID:
            raise IdError(
                f"{given!r} is not a report id: lower-case letters, digits, '.', '_' and '-', starting "
                f"with a letter or digit, at most {MAX_ID} characters (e.g. nomad-5883, "
                "acme-incident-42), or the URL of the report"
            )
        return given, ""
    parts = urlsplit(given)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise IdError(f"{given!r}: a report's URL is http(s)://host/path")
    item = GITHUB_ITEM.match(parts.path) if parts.netloc.lower() in ("github.com", "www.github.com") else None
    if item:
        candidate = f"{item.group(2)}-{item.group(4)}"
    else:
        segments = [s for s in parts.path.split("/") if s]
        candidate = unquote(segments[-1]) if segments else ""
    cleaned = re.sub(r"[^a-z0-9._-]+", "-", candidate.lower()).strip("-._")[:MAX_ID]
    if not cleaned or not REPORT_ID.match(cleaned):
        raise IdError(f"{given!r}: no id can be taken from this URL's path; give one (e.g. acme-incident-42)")
    return cleaned, given


def catalogue_problem(bug: str, link: str) -> str | None:
    """Why `bug` with `link` cannot be a catalogue entry (e2e/scenarios/), or None when it can."""
    if not CATALOGUE_ID.match(bug):
        return (
            f"bug: a catalogue entry (e2e/scenarios/) is nomad-<issue number> (fieldlab-<n> for a bug of "
            f"this project's own), not {bug!r}; a report of your own goes in a directory of your own "
            "(fieldlab repro new ID --jobspec FILE --dir DIR), where any id will do"
        )
    if bug.startswith("nomad-") and not NOMAD_LINK.match(link):
        return (
            "link: a catalogue entry links its public Nomad issue or pull request "
            f"(https://github.com/hashicorp/nomad/issues/<n>), not {link!r}"
        )
    if not link:
        return "link: a catalogue entry says where the bug is described"
    return None


def flags_of(text: str) -> tuple[str, ...]:
    """The fault flags a scenario's `flag` names: () for none."""
    if text.strip().lower() in NO_FLAG:
        return ()
    return tuple(f.strip() for f in text.split(",") if f.strip())


def unknown_flags_message(unknown: Iterable[str], known: Iterable[str]) -> str:
    """What an unknown fault flag is called, with the closest known ones (never the whole list)."""
    choices = sorted(known)
    said = []
    for flag in unknown:
        close = difflib.get_close_matches(flag, choices, n=3, cutoff=0.6)
        hint = f"did you mean {', '.join(close)}?" if close else "no known flag is close"
        said.append(f"unknown agent fault flag {flag!r} ({hint})")
    return "; ".join(said) + (
        f"; the {len(choices)} flags the agent implements: `make repro BUG=list` "
        "(agent/fieldbugs/catalogue.py)"
    )


def flag_problem(text: str, known: Iterable[str]) -> str | None:
    """Why a scenario's `flag` cannot run (an unknown flag), or None."""
    known_set = set(known)
    unknown = [f for f in flags_of(text) if f not in known_set]
    if not unknown:
        return None
    return unknown_flags_message(unknown, known_set) + (
        "; leave `flag` out to run the scenario once (PRESENT or ABSENT)"
    )
