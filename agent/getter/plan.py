"""What an artifact asks for, decided from plain data (no I/O): its URL with the task's variables and
its options, its checksum, whether and how it is unpacked, where it lands, and whether its host is
one the agent may fetch from. go-getter's rules, as Nomad's client uses them, where they apply to
http(s) sources."""

from __future__ import annotations

import ipaddress
import posixpath
import re
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agent.errors import AgentError

CHECKSUM_TYPES = {"md5": 32, "sha1": 40, "sha256": 64, "sha512": 128}  # hex digits of each
MODES = ("any", "file", "dir")
# go-getter's decompressors, by the source's extension (longest first) or `archive = "<type>"`
ARCHIVES = (
    ("tar.gz", "tar.gz"),
    ("tgz", "tar.gz"),
    ("tar.bz2", "tar.bz2"),
    ("tbz2", "tar.bz2"),
    ("tar.xz", "tar.xz"),
    ("txz", "tar.xz"),
    ("tar", "tar"),
    ("zip", "zip"),
    ("gz", "gz"),
    ("bz2", "bz2"),
    ("xz", "xz"),
)
ARCHIVE_TYPES = frozenset(kind for _, kind in ARCHIVES)
SINGLE_FILE = frozenset({"gz", "bz2", "xz"})  # a compressed file, not a tree
# go-getter's own options: read by the getter, not sent to the server
GETTER_OPTIONS = frozenset({"checksum", "archive"})
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_.\-]*)\}")
# None unless the client config says: loopback and link-local never by default (issue 51: the agent,
# root on the host's network, fetched Consul's 127.0.0.1:8500 for a task)
DEFAULT_ALLOWED: tuple[str, ...] = ()


class ArtifactError(AgentError):
    """An artifact that cannot be fetched as written (not worth a retry)."""


@dataclass(frozen=True)
class Checksum:
    kind: str
    digest: str  # lower-case hex


@dataclass(frozen=True)
class FetchPlan:
    url: str  # with the task's variables and the options the server gets
    host: str
    checksum: Checksum | None
    archive: str  # "" for none, else one of ARCHIVE_TYPES
    file_dest: str  # mode file, or a plain file in mode any: the file's path in the sandbox
    dir_dest: str  # an archive: the dir its members land in
    headers: Mapping[str, str]


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """`${VAR}` replaced by the task's variable (Nomad's ReplaceEnv); an unknown one is kept."""
    return _VAR.sub(lambda m: env.get(m.group(1), m.group(0)), text)


def parse_checksum(text: str) -> Checksum:
    """go-getter's `checksum` option: "type:hex". A checksum file ("file:URL") is not supported."""
    kind, sep, digest = text.partition(":")
    kind, digest = kind.strip().lower(), digest.strip().lower()
    if not sep:
        raise ArtifactError(f'checksum "{text}" is not "type:value" (types: {", ".join(CHECKSUM_TYPES)})')
    if kind == "file":
        raise ArtifactError('a checksum file (checksum = "file:...") is not supported by fieldlab-agent')
    if kind not in CHECKSUM_TYPES:
        raise ArtifactError(f'checksum type "{kind}" is not one of {", ".join(CHECKSUM_TYPES)}')
    if len(digest) != CHECKSUM_TYPES[kind] or not re.fullmatch(r"[0-9a-f]+", digest):
        raise ArtifactError(f"checksum {kind}:{digest[:16]}... is not {CHECKSUM_TYPES[kind]} hex digits")
    return Checksum(kind, digest)


def archive_kind(path: str, option: str | None) -> str:
    """How the download is unpacked: `archive = "false"` never, `archive = "<type>"` as that type,
    else by the URL path's extension ("" when it is no archive)."""
    if option is not None:
        value = option.strip().lower()
        if value in ("false", "0", ""):
            return ""
        if value in ("true", "1"):
            option = None
        elif value in ARCHIVE_TYPES:
            return value
        else:
            raise ArtifactError(
                f'archive "{option}" is not false or one of {", ".join(sorted(ARCHIVE_TYPES))}'
            )
    name = posixpath.basename(path).lower()
    for ext, kind in ARCHIVES:
        if name.endswith("." + ext):
            return kind
    return ""


def destination_in_task(dest: str, task_dir: str | None = None) -> str:
    """An interpolated destination as a path relative to the task dir, as Nomad's TaskEnv.ClientPath
    takes it: a relative path as it is; an absolute one inside the task dir or the alloc's shared dir
    (`task_dir`'s sibling alloc/: what `${NOMAD_TASK_DIR}` and `${NOMAD_ALLOC_DIR}` give) relative to
    the task dir; any other absolute path ("/local/x", "/tmp/x") joined onto the task dir. Still
    leaving the task dir after that (other than into the shared alloc/ dir, as ../alloc/...) is an
    ArtifactError, Nomad's "escapes alloc directory". Lexical: the writers (agent.allocdir.sandbox) open every
    component below the task dir without following a link."""
    given = dest
    if dest.startswith("/"):
        clean = posixpath.normpath(dest)
        inside = None
        if task_dir is not None:
            shared = posixpath.join(posixpath.dirname(task_dir.rstrip("/")), "alloc")
            for base, prefix in ((task_dir, "."), (shared, "alloc")):
                rel = posixpath.relpath(clean, posixpath.normpath(base))
                if rel != ".." and not rel.startswith("../"):
                    inside = posixpath.normpath(posixpath.join(prefix, rel))
                    break
        dest = inside if inside is not None else posixpath.normpath("." + dest)
    parts = posixpath.normpath(dest or ".").split("/")
    if parts[0] == ".." and parts[1:2] != ["alloc"]:
        raise ArtifactError(f'destination "{given}" escapes the alloc directory')
    return dest


def plan_fetch(
    source: str,
    destination: str,
    mode: str,
    options: Mapping[str, str],
    headers: Mapping[str, str],
    env: Mapping[str, str],
    task_dir: str | None = None,
) -> FetchPlan:
    """The fetch of one artifact, or ArtifactError saying why it cannot be. `task_dir`: the task dir's
    host path, for a destination that a variable made absolute (`${NOMAD_TASK_DIR}/x`)."""
    raw = interpolate(source, env)
    url = urllib.parse.urlsplit(raw)
    if url.scheme not in ("http", "https"):
        shown = url.scheme or "no scheme"
        raise ArtifactError(
            f'source "{raw}": {shown} is not supported by fieldlab-agent (http and https are)'
        )
    if not url.hostname:
        raise ArtifactError(f'source "{raw}" names no host')
    given = {k: interpolate(v, env) for k, v in options.items()}
    checksum = parse_checksum(given["checksum"]) if "checksum" in given else None
    archive = archive_kind(url.path, given.get("archive"))
    query = urllib.parse.parse_qsl(url.query, keep_blank_values=True)
    query += [(k, v) for k, v in sorted(given.items()) if k not in GETTER_OPTIONS]
    full = urllib.parse.urlunsplit((url.scheme, url.netloc, url.path, urllib.parse.urlencode(query), ""))
    base = posixpath.basename(url.path.rstrip("/"))
    dest = destination_in_task(interpolate(destination, env), task_dir)
    if mode == "file":
        if archive and archive not in SINGLE_FILE:
            raise ArtifactError(
                f'mode "file" cannot hold the {archive} archive "{base}": use mode "dir" or "any"'
            )
        return FetchPlan(full, url.hostname, checksum, archive, dest, "", dict(headers))
    if archive and archive not in SINGLE_FILE:
        return FetchPlan(full, url.hostname, checksum, archive, "", dest, dict(headers))
    if mode == "dir":
        raise ArtifactError(f'mode "dir" needs an archive, and "{base}" is none (use mode "file" or "any")')
    if not base:
        raise ArtifactError(f'source "{raw}" names no file')
    name = base
    if archive in SINGLE_FILE:
        name = base[: -(len(archive) + 1)] if base.lower().endswith("." + archive) else base
    return FetchPlan(full, url.hostname, checksum, archive, posixpath.join(dest, name), "", dict(headers))


Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _address(text: str) -> Address:
    """An address as the kernel connects to it: an IPv4-mapped IPv6 address is its IPv4 address."""
    address = ipaddress.ip_address(text.split("%", 1)[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _host_only(address: Address) -> bool:
    """Loopback, link-local or unspecified (0.0.0.0 reaches loopback): the host's own, or its link's."""
    return address.is_loopback or address.is_link_local or address.is_unspecified


def _names_host_only(net: Network) -> bool:
    """An entry that is itself a loopback or link-local network (both ends inside one)."""
    first, last = net.network_address, net.broadcast_address
    return (first.is_loopback and last.is_loopback) or (first.is_link_local and last.is_link_local)


def host_allowed(host: str, addresses: Sequence[str], allowed: Sequence[str]) -> str | None:
    """Whether the agent may fetch from `host`, which resolved to `addresses` (the ones it will
    connect to): every address must be in an allowed network, or the host named in the list as is.
    A loopback, link-local or unspecified address needs an entry that is itself a loopback or
    link-local network ("127.0.0.0/8", "::1/128", "169.254.0.0/16"): a wider network ("0.0.0.0/0")
    or a name does not let the host's own services in. None when it may; why not, otherwise."""
    networks: list[Network] = []
    named = False
    for item in allowed:
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            named = named or item.lower() == host.lower()
    if not addresses:
        return f"{host} does not resolve"
    for text in addresses:
        address = _address(text)
        if _host_only(address):
            ok = any(address in net and _names_host_only(net) for net in networks)
            what = "a loopback or link-local address, allowed only by such a network named in"
        else:
            ok = named or any(address in net for net in networks)
            what = "not in"
        if not ok:
            return (
                f"{host} ({text}) is {what} the client's artifact_allowed_hosts "
                f"({', '.join(allowed) or 'none'}): the agent fetches from the lab's own nodes only"
            )
    return None
