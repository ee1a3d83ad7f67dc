"""The docker driver's image pull, as Nomad's (drivers/docker/driver.go createImage and pullImage,
coordinator.go PullImage, progress.go): an image on the node whose tag is not `latest` is used without
a pull unless the task sets force_pull; otherwise the task gets a `Driver` event "Downloading image"
and the engine pulls it, with the task's `auth` (or the plugin's `auth { config, helper }`),
bounded by `image_pull_timeout` (the whole pull) and the plugin's `pull_activity_timeout` (no progress
message from the engine for that long). One pull per image at a time: a second task asking for the
same image waits for the first pull (coordinator.go's pull futures). A failed pull is a DriverError,
recoverable unless Docker said the image was not found (recoverablePullError).

The decisions are pure (agent.drivers.pullconfig); the engine sits behind `PullApi`.
"""

from __future__ import annotations

import base64
import json
import logging
import queue
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import docker
import docker.errors
import requests

from agent.drivers.base import DriverError
from agent.drivers.pullconfig import (
    DOWNLOADING,
    PROGRESS_CHECK_INTERVAL,
    SLOW_PROGRESS_INTERVAL,
    Progress,
    PullConfig,
    TaskPull,
    downloading_event,
    engine_auth,
    image_ref,
    needs_pull,
    parse_image,
    pull_timeout,
    recoverable,
    registry_host,
)
from agent.fieldbugs.bugs import NO_BUGS, Bugs

log = logging.getLogger(__name__)

Emit = Callable[[str, Mapping[str, str]], None]  # a task event of type "Driver": message, details


class PullStream(Protocol):
    def __iter__(self) -> Iterator[Mapping[str, Any]]: ...

    def cancel(self) -> None: ...


class PullApi(Protocol):
    """What a pull needs of the engine."""

    def local(self, image: str) -> bool: ...

    def start_pull(self, repo: str, tag: str, auth: Mapping[str, str], activity: float) -> PullStream: ...


class PullFailed(Exception):
    """A pull that failed: Nomad's error text and whether a restart may cure it."""

    def __init__(self, message: str, recoverable: bool = True) -> None:
        super().__init__(message)
        self.recoverable = recoverable


# -- credentials ---------------------------------------------------------------------------------
def resolve_auth(task: Mapping[str, str], plugin: PullConfig, repo: str) -> dict[str, str] | None:
    """Nomad's resolveRegistryAuthentication: the task's `auth` when it sets any of username,
    password or server_address, else the plugin's docker config file, else its helper; None when
    none has credentials. ValueError when a source cannot be read."""
    if any(task.get(k) for k in ("username", "password", "server_address")):
        return {"username": task.get("username", ""), "password": task.get("password", "")}
    host = registry_host(repo)
    if plugin.auth_config:
        found = _from_docker_config(Path(plugin.auth_config), host)
        if found is not None:
            return found
    if plugin.auth_helper:
        return _from_helper(plugin.auth_helper, host)
    return None


def _index_name(host: str) -> str:
    return "https://index.docker.io/v1/" if host == "docker.io" else host


def _host_of(key: str) -> str:
    return key.removeprefix("https://").removeprefix("http://").split("/", 1)[0]


def _from_docker_config(path: Path, host: str) -> dict[str, str] | None:
    try:
        cfg = json.loads(path.read_text())
    except OSError as exc:
        raise ValueError(f"Failed to open auth config file: {path}, error: {exc.strerror}") from None
    except ValueError as exc:
        raise ValueError(f"Failed to parse auth config file: {exc}") from None
    if not isinstance(cfg, dict):
        raise ValueError("Failed to parse auth config file: not a JSON object")
    auths = cfg.get("auths") or {}
    index = _index_name(host)
    entry = auths.get(index) or next((v for k, v in auths.items() if _host_of(k) == _host_of(index)), None)
    if isinstance(entry, dict):
        user, password = str(entry.get("username", "")), str(entry.get("password", ""))
        if entry.get("auth") and not user:
            user, _, password = base64.b64decode(str(entry["auth"])).decode().partition(":")
        if user or password:
            return {"username": user, "password": password}
    helper = (cfg.get("credHelpers") or {}).get(index) or cfg.get("credsStore") or ""
    return _from_helper(str(helper), host) if helper else None


def _from_helper(name: str, host: str) -> dict[str, str] | None:
    helper = f"docker-credential-{name}"
    try:
        out = subprocess.run(  # the plugin config names the helper, as Nomad's
            [helper, "get"], input=_index_name(host), capture_output=True, text=True, timeout=30, check=True
        ).stdout
    except subprocess.CalledProcessError as exc:
        raise ValueError(f"{helper} with input {host!r} failed with stderr: {exc.stderr}") from None
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ValueError(f"{helper}: {exc}") from None
    try:
        answer = json.loads(out)
    except ValueError as exc:
        raise ValueError(f"{helper}: {exc}") from None
    user, secret = str(answer.get("Username", "")), str(answer.get("Secret", ""))
    return {"username": user, "password": secret} if user or secret else None


# -- the pull --------------------------------------------------------------------------------------
@dataclass
class _Future:
    done: threading.Event
    error: PullFailed | None = None


class Puller:
    """Pulls images for the docker driver; one pull per image at a time (a second caller waits for
    the first one's outcome and gets its progress events too)."""

    def __init__(
        self,
        api: PullApi,
        plugin: PullConfig,
        *,
        bugs: Bugs = NO_BUGS,
        check_interval: float = PROGRESS_CHECK_INTERVAL,
        slow_interval: float = SLOW_PROGRESS_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api, self.plugin = api, plugin
        self.bugs = bugs  # the fault flags the pull's decisions take (pullconfig: the timeout, auth, event)
        self.check_interval, self.slow_interval, self.clock = check_interval, slow_interval, clock
        self._lock = threading.Lock()
        self._futures: dict[str, _Future] = {}
        self._emitters: dict[str, list[Emit]] = {}

    def ensure(self, image: str, opts: TaskPull, emit: Emit, what: str) -> None:
        """The image on the node, pulled when Nomad's driver would pull it (createImage); a
        DriverError (`what`: the task) when it cannot be had."""
        try:
            repo, tag = parse_image(image)
        except ValueError as exc:
            raise DriverError("docker", what, str(exc)) from None
        local = False if opts.force_pull or tag == "latest" else self.api.local(image)
        if not needs_pull(tag, opts.force_pull, local):
            return
        try:
            auth = resolve_auth(opts.auth, self.plugin, repo)
        except ValueError as exc:
            if not opts.auth_soft_fail:
                raise DriverError(
                    "docker", what, f"Failed to find docker auth for repo {repo!r}: {exc}"
                ) from None
            log.warning("%s: failed to find docker auth for repo %s (auth_soft_fail): %s", what, repo, exc)
            auth = None
        ref = image_ref(repo, tag)
        announce = downloading_event(self.bugs)
        if announce == "before":
            emit(DOWNLOADING, {"image": ref})
        timeout = pull_timeout(opts.image_pull_timeout, self.plugin.image_pull_timeout, self.bugs)
        try:
            self.pull(image, repo, tag, engine_auth(auth, self.bugs), emit, timeout)
        except PullFailed as exc:
            raise DriverError("docker", what, str(exc), recoverable=exc.recoverable) from None
        finally:
            if announce == "after":
                emit(DOWNLOADING, {"image": ref})

    def pull(
        self, image: str, repo: str, tag: str, auth: Mapping[str, str], emit: Emit, timeout: float
    ) -> None:
        """coordinator.go PullImage: join the image's pull under way, or start one."""
        with self._lock:
            self._emitters.setdefault(image, []).append(emit)
            future = self._futures.get(image)
            mine = future is None
            if future is None:
                future = self._futures[image] = _Future(threading.Event())
        if mine:
            try:
                self._pull(image, repo, tag, auth, timeout)
            except PullFailed as exc:
                future.error = exc
            finally:
                with self._lock:
                    self._futures.pop(image, None)
                    self._emitters.pop(image, None)
                future.done.set()
        else:
            future.done.wait()
        if future.error is not None:
            raise future.error

    def _emit(self, image: str, message: str) -> None:
        with self._lock:
            emitters = list(self._emitters.get(image, ()))
        for emit in emitters:
            emit(message, {"image": image})

    def _pull(self, image: str, repo: str, tag: str, auth: Mapping[str, str], timeout: float) -> None:
        """pullImageImpl: the engine's pull, its messages read in a thread while this one watches the
        whole-pull deadline and the activity deadline; either cancels the pull."""
        activity = self.plugin.pull_activity_timeout
        start = self.clock()
        deadline = start + timeout
        messages: queue.Queue[tuple[str, Any]] = queue.Queue()
        try:
            stream = self.api.start_pull(repo, tag, auth, min(activity, timeout))
        except PullFailed as exc:
            raise PullFailed(f"Failed to pull `{image}`: {exc}", recoverable(str(exc))) from None

        def read() -> None:
            try:
                for msg in stream:
                    messages.put(("msg", msg))
                messages.put(("end", None))
            except Exception as exc:  # handed to the watching thread
                messages.put(("error", exc))

        threading.Thread(target=read, name=f"docker-pull-{image}", daemon=True).start()
        progress = Progress()
        last = last_slow = start
        while True:
            now = self.clock()
            if now >= deadline:
                stream.cancel()
                log.error("timeout pulling image %s", image)
                raise PullFailed(
                    f"Failed to pull `{image}`: context deadline exceeded (image_pull_timeout {timeout:g}s)"
                )
            if now - last > activity:
                stream.cancel()
                log.error("image pull of %s aborted due to inactivity: %s", image, progress.text())
                raise PullFailed(
                    f"Failed to pull `{image}`: context canceled (no progress for {activity:g}s: "
                    f"pull_activity_timeout; last: {progress.text()})"
                )
            if now - last_slow > self.slow_interval:
                self._emit(image, f"Docker image pull progress: {progress.text()}")
                last_slow = now
            try:
                kind, value = messages.get(timeout=max(0.0, min(self.check_interval, deadline - now)))
            except queue.Empty:
                continue
            if kind == "end":
                break
            if kind == "error":
                stream.cancel()
                text = str(value)
                raise PullFailed(f"Failed to pull `{image}`: {text}", recoverable(text))
            if value.get("error"):
                stream.cancel()
                text = str(value["error"])
                raise PullFailed(f"Failed to pull `{image}`: {text}", recoverable(text))
            progress.add(value)
            last = self.clock()
        log.debug("docker pull of %s succeeded", image)
        if not self.api.local(image):
            raise PullFailed(f"Failed to pull `{image}`: pulled, but the engine does not have it")


# -- the engine --------------------------------------------------------------------------------------
class EnginePullApi:
    """PullApi over docker-py's low-level client: the pull as docker-py's `APIClient.pull(stream=
    True, decode=True)` sends it (POST /images/create), but with a read timeout (an engine that sends
    nothing for the activity timeout ends the read) and a cancel that shuts the response's socket
    (the engine then cancels the pull, as it does when Nomad's context is cancelled). Credentials
    go as Nomad sends them: the username and password, base64 JSON in X-Registry-Auth; never the
    agent user's ~/.docker/config.json."""

    def __init__(self, client: Callable[[], Any]) -> None:
        self._client = client

    def local(self, image: str) -> bool:
        try:
            self._client().api.inspect_image(image)
        except docker.errors.ImageNotFound:
            return False
        except docker.errors.APIError as exc:
            if exc.status_code == 404:
                return False
            raise
        return True

    def start_pull(self, repo: str, tag: str, auth: Mapping[str, str], activity: float) -> PullStream:
        return _EngineStream(self._client().api, repo, tag, dict(auth), activity)


class _EngineStream:
    def __init__(self, api: Any, repo: str, tag: str, auth: dict[str, str], activity: float) -> None:
        self.api, self.repo, self.tag, self.auth, self.activity = api, repo, tag, auth, activity
        self._response: Any = None
        self._cancelled = False

    def __iter__(self) -> Iterator[Mapping[str, Any]]:
        api = self.api
        params = {"fromImage": self.repo, "tag": self.tag} if self.tag else {"fromImage": self.repo}
        headers = {"X-Registry-Auth": docker.auth.encode_header(self.auth)} if self.auth else {}
        try:
            self._response = response = api._post(
                api._url("/images/create"), params=params, headers=headers, stream=True,
                timeout=(30, self.activity),
            )  # fmt: skip
            if self._cancelled:
                self.cancel()
            api._raise_for_status(response)
            yield from api._stream_helper(response, decode=True)
        except docker.errors.APIError as exc:
            raise RuntimeError(f"Error response from daemon: {exc.explanation or exc}") from None
        except requests.RequestException as exc:
            raise RuntimeError(str(exc)) from None

    def cancel(self) -> None:
        self._cancelled = True
        response = self._response
        if response is None:
            return
        try:
            raw = response.raw._fp.fp.raw
            sock = getattr(raw, "_sock", raw)
            sock.shutdown(socket.SHUT_RDWR)
        except (AttributeError, OSError):
            pass
        response.close()
