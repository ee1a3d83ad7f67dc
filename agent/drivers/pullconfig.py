"""What an image pull reads, as Nomad's docker driver reads it (pure: drivers/docker/config.go,
driver.go createImage/pullImage, coordinator.go, progress.go, utils.go parseDockerImage): the plugin's
pull settings, a task's pull options, and the decisions (whether to pull, whether a failed pull is
recoverable, the progress text). agent.drivers.dockerpull does the pull."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from agent.drivers.dockervalues import Refuses, read_block, read_bool, read_str
from agent.fieldbugs.bugs import Bugs
from agent.jobspec.durations import parse_duration

# Nomad's defaults (drivers/docker/config.go): image_pull_timeout "5m", pull_activity_timeout "2m"
# with a minimum of 1m.
IMAGE_PULL_TIMEOUT = 300.0
PULL_ACTIVITY_TIMEOUT = 120.0
PULL_ACTIVITY_MINIMUM = 60.0
# progress.go: the activity check's tick, and how often a slow pull reports its progress as an event
PROGRESS_CHECK_INTERVAL = 10.0
SLOW_PROGRESS_INTERVAL = 120.0
# coordinator.go imageNotFoundMatcher: a pull error matching it is not recoverable
IMAGE_NOT_FOUND = re.compile(r"Error: image .+ not found")
DOWNLOADING = "Downloading image"  # driver.go pullImage's task event (type "Driver")
AUTH_KEYS = ("username", "password", "email", "server_address")


@dataclass(frozen=True)
class PullConfig:
    """Nomad's plugin "docker" pull settings: `image_pull_timeout` (a task's default),
    `pull_activity_timeout`, `auth { config, helper }` (a docker config.json; a credential helper
    `docker-credential-<helper>`). Seconds."""

    image_pull_timeout: float = IMAGE_PULL_TIMEOUT
    pull_activity_timeout: float = PULL_ACTIVITY_TIMEOUT
    auth_config: str = ""
    auth_helper: str = ""


PLUGIN_KEYS = frozenset({"image_pull_timeout", "pull_activity_timeout", "auth"})


def pull_plugin(cfg: Mapping[str, Any]) -> tuple[PullConfig, list[tuple[str, str]]]:
    """The plugin config's pull settings, or (key, why) of each bad one (Nomad's checks and texts)."""
    bad: list[tuple[str, str]] = []
    kw: dict[str, Any] = {}
    for key in ("image_pull_timeout", "pull_activity_timeout"):
        if key not in cfg:
            continue
        value = cfg[key]
        try:
            if not isinstance(value, str):
                raise ValueError(f'must be a duration string (e.g. "5m"), not {value!r}')
            seconds = parse_duration(value)
        except ValueError as exc:
            bad.append((key, f"failed to parse '{key}' duration: {exc}"))
            continue
        if key == "pull_activity_timeout" and seconds < PULL_ACTIVITY_MINIMUM:
            bad.append((key, "pull_activity_timeout is less than minimum, 1m0s"))
            continue
        kw[key] = seconds
    if "auth" in cfg:
        auth = cfg["auth"]
        if (
            not isinstance(auth, Mapping)
            or set(auth) - {"config", "helper"}
            or not all(isinstance(v, str) for v in auth.values())
        ):
            bad.append(("auth", 'must be {"config": "<docker config.json>", "helper": "<name>"}'))
        else:
            kw["auth_config"] = auth.get("config", "")
            kw["auth_helper"] = auth.get("helper", "")
    return PullConfig(**kw), bad


@dataclass(frozen=True)
class TaskPull:
    """A task's pull options: force_pull, auth, auth_soft_fail, image_pull_timeout (seconds; None:
    the plugin's)."""

    force_pull: bool = False
    auth: dict[str, str] = field(default_factory=dict)
    auth_soft_fail: bool = False
    image_pull_timeout: float | None = None


def task_pull(config: Mapping[str, Any], out: Refuses) -> TaskPull:
    """The task's pull options, each bad one refused into `out` with the reason."""
    auth: dict[str, str] = {}
    block = read_block(config, "auth", out)
    for key, value in block.items():
        if key not in AUTH_KEYS:
            out.refuse(f"auth.{key}", f"not a field of the docker auth block ({', '.join(AUTH_KEYS)})")
        elif not isinstance(value, str):
            out.refuse(f"auth.{key}", "must be a string")
        else:
            auth[key] = value
    timeout = None
    if text := read_str(config, "image_pull_timeout", out):
        try:
            timeout = parse_duration(text)
        except ValueError as exc:
            out.refuse("image_pull_timeout", f"Failed to parse image_pull_timeout: {exc}")
    return TaskPull(
        force_pull=bool(read_bool(config, "force_pull", out)),
        auth=auth,
        auth_soft_fail=bool(read_bool(config, "auth_soft_fail", out)),
        image_pull_timeout=timeout,
    )


# -- decisions -----------------------------------------------------------------------------------
_REF = re.compile(
    r"^(?P<repo>[\w./:-]+?)(?::(?P<tag>[\w][\w.-]{0,127}))?(?:@(?P<digest>[a-z0-9]+:[0-9a-fA-F]+))?$"
)


def parse_image(image: str) -> tuple[str, str]:
    """(repo, tag) as Nomad's parseDockerImage: no tag is "latest"; with a digest the repo carries it
    (`repo@sha256:...`) and the tag is "". ValueError on what is no image reference."""
    m = _REF.match(image.strip()) if image.strip() == image else None
    if m is None or not m.group("repo") or m.group("repo").endswith("/"):
        raise ValueError(f"unable to create local docker image {image!r}: not a docker image reference")
    repo, tag, digest = m.group("repo"), m.group("tag") or "", m.group("digest")
    if digest:
        return f"{repo}@{digest}", ""
    return repo, tag or "latest"


def image_ref(repo: str, tag: str) -> str:
    """Nomad's dockerImageRef: repo:tag, or the repo alone (one with a digest)."""
    return f"{repo}:{tag}" if tag else repo


def needs_pull(tag: str, force_pull: bool, local: bool) -> bool:
    """Nomad's createImage: a force_pull or a `latest` tag always pulls; any other image is used
    as it is on the node, and pulled only when it is not there."""
    return force_pull or tag == "latest" or not local


def recoverable(error: str) -> bool:
    """coordinator.go recoverablePullError: every failed pull is recoverable (the restart policy
    retries it), except one whose error text says the image was not found (Docker's old text)."""
    return IMAGE_NOT_FOUND.search(error) is None


def pull_timeout(task: float | None, plugin: float, bugs: Bugs) -> float:
    """The whole pull's bound in seconds: the task's image_pull_timeout, else the plugin's. With
    `image-pull-timeout-ignored` (nomad-24991: Nomad 1.9.0 to 1.9.5 made the deadline's context and
    handed the engine another) none: a pull from a registry that never answers goes on until the
    engine gives up or pull_activity_timeout ends it."""
    if bugs.image_pull_timeout_ignored:
        return math.inf
    return task if task is not None else plugin


def engine_auth(auth: Mapping[str, str] | None, bugs: Bugs) -> dict[str, str]:
    """The credentials the engine is handed for a pull (X-Registry-Auth): the ones resolved, {} for
    none. With `pull-auth-not-encoded` (nomad-24181: Nomad 1.9.0 set the Docker SDK's RegistryAuth
    without the base64 JSON the engine's API takes, whichever source the credentials came from)
    the engine gets none it can read, so it pulls anonymously."""
    if auth is None or bugs.pull_auth_not_encoded:
        return {}
    return dict(auth)


DownloadingWhen = Literal["before", "after"]


def downloading_event(bugs: Bugs) -> DownloadingWhen:
    """When the task is shown its `Driver` event "Downloading image": before the pull, so a task
    pending on a long pull says why. With `downloading-event-after-pull` (nomad-2165: Nomad 0.5.2
    recorded the event without a state change, so it reached the servers with the next one) only
    once the pull is over, with its outcome."""
    return "after" if bugs.downloading_event_after_pull else "before"


def registry_host(repo: str) -> str:
    """The registry of a repository as docker names it: its first component when that is a host
    (a dot, a port or `localhost`), else Docker Hub (docker.io)."""
    first, _, rest = repo.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"


def bytes_size(n: float) -> str:
    """go-units BytesSize: binary units, 4 significant digits ("1.5MiB")."""
    units = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
    i = 0
    while n >= 1024 and i < len(units) - 1:
        n /= 1024
        i += 1
    return f"{n:.4g}{units[i]}"


_LAYER_STATES = {
    "Pulling fs layer": "waiting",
    "Waiting": "waiting",
    "Downloading": "pulling",
    "Verifying Checksum": "pulling",
    "Download complete": "pulled",
    "Extracting": "pulled",
    "Pull complete": "pulled",
    "Already exists": "pulled",
}


@dataclass
class Progress:
    """progress.go imageProgress: the layers' states and bytes, from the engine's pull messages."""

    layers: dict[str, list[Any]] = field(default_factory=dict)  # id -> [state, current, total]
    seen: bool = False

    def add(self, msg: Mapping[str, Any]) -> None:
        self.seen = True
        state = _LAYER_STATES.get(str(msg.get("status", "")))
        if state is None:
            return
        layer = self.layers.setdefault(str(msg.get("id", "")), [state, 0, 0])
        layer[0] = state
        detail = msg.get("progressDetail") or {}
        if msg.get("status") == "Downloading" and isinstance(detail, Mapping):
            layer[1], layer[2] = int(detail.get("current") or 0), int(detail.get("total") or 0)
        elif msg.get("status") == "Download complete":
            layer[1] = layer[2]

    def text(self) -> str:
        if not self.seen:
            return "No progress"
        count = {s: sum(1 for lay in self.layers.values() if lay[0] == s) for s in ("waiting", "pulling")}
        pulled = sum(1 for lay in self.layers.values() if lay[0] == "pulled")
        cur = sum(lay[1] for lay in self.layers.values())
        total = sum(lay[2] for lay in self.layers.values())
        return (
            f"Pulled {pulled}/{len(self.layers)} ({bytes_size(cur)}/{bytes_size(total)}) layers: "
            f"{count['waiting']} waiting/{count['pulling']} pulling"
        )
