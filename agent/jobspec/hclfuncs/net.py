"""Network (cidr*) and file functions."""

from __future__ import annotations

import ipaddress
import os
import pwd
from pathlib import Path

from agent.jobspec.hclfuncs.registry import arg_int, arg_str, function
from agent.jobspec.hclvalues import MAX_FILE, Context, EvalError

# networks


def _network(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError as e:
        raise EvalError(f"invalid CIDR prefix {text!r}: {e}") from None


@function("cidrhost", 2, 2, "the IP address of host number n in a CIDR prefix")
def _cidrhost(ctx: Context, a: list[object]) -> object:
    net, n = _network(arg_str(a, 0)), arg_int(a, 1)
    if not -net.num_addresses <= n < net.num_addresses:
        raise EvalError(f"cidrhost: prefix {net} has no host number {n}")
    return str(net[n])


@function("cidrnetmask", 1, 1, "the netmask of an IPv4 CIDR prefix")
def _cidrnetmask(ctx: Context, a: list[object]) -> object:
    net = _network(arg_str(a, 0))
    if net.version != 4:
        raise EvalError("cidrnetmask: only IPv4 prefixes have a netmask")
    return str(net.netmask)


@function("cidrsubnet", 3, 3, "subnet number n of a prefix extended by newbits")
def _cidrsubnet(ctx: Context, a: list[object]) -> object:
    net, bits, n = _network(arg_str(a, 0)), arg_int(a, 1), arg_int(a, 2)
    new_prefix = net.prefixlen + bits
    if bits < 0 or new_prefix > net.max_prefixlen or not 0 <= n < 2**bits:
        raise EvalError(f"cidrsubnet: no subnet {n} with {bits} more bits in {net}")
    size = 2 ** (net.max_prefixlen - new_prefix)
    base = int(net.network_address) + n * size
    return f"{ipaddress.ip_address(base) if net.version == 4 else ipaddress.IPv6Address(base)}/{new_prefix}"


@function("cidrsubnets", 1, None, "consecutive subnets of a prefix, one per newbits argument")
def _cidrsubnets(ctx: Context, a: list[object]) -> object:
    net = _network(arg_str(a, 0))
    out: list[object] = []
    at = int(net.network_address)
    for i in range(1, len(a)):
        bits = arg_int(a, i)
        prefix = net.prefixlen + bits
        if bits < 1 or prefix > net.max_prefixlen:
            raise EvalError(f"cidrsubnets: {bits} more bits do not fit in {net}")
        size = 2 ** (net.max_prefixlen - prefix)
        at = -(-at // size) * size  # aligned to its own size
        if at + size > int(net.network_address) + net.num_addresses:
            raise EvalError(f"cidrsubnets: not enough room in {net}")
        addr = ipaddress.ip_address(at) if net.version == 4 else ipaddress.IPv6Address(at)
        out.append(f"{addr}/{prefix}")
        at += size
    return out


# files


@function("file", 1, 1, "the text of a file, relative to the jobspec's directory (not over the API)")
def _file(ctx: Context, a: list[object]) -> object:
    text = arg_str(a, 0)
    if ctx.bundle is not None and ctx.base_dir is None:
        if text not in ctx.bundle:
            raise EvalError(f"file: {text!r} was not sent with the jobspec (the CLI sends what file() reads)")
        return ctx.bundle[text]
    content = _read_file(_file_path(ctx, text))
    ctx.read[text] = content
    return content


def _read_file(path: Path) -> str:
    try:
        with path.open("rb") as f:
            data = f.read(MAX_FILE + 1)
    except OSError as e:
        raise EvalError(f"file: cannot read {str(path)!r}: {e.strerror or e}") from None
    if len(data) > MAX_FILE:
        raise EvalError(f"file: {str(path)!r} is larger than 1 MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise EvalError(f"file: {str(path)!r} is not UTF-8 text") from None


def _go_clean(path: str) -> str:
    """Go's filepath.Clean (Unix): one slash between elements, no `.`, `..` resolved lexically."""
    if not path:
        return "."
    rooted = path.startswith("/")
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts and parts[-1] != "..":
                parts.pop()
            elif not rooted:
                parts.append("..")
            continue
        parts.append(part)
    out = "/".join(parts)
    return "/" + out if rooted else out or "."


@function("basename", 1, 1, "the last element of a path (Go's filepath.Base)")
def _basename(ctx: Context, a: list[object]) -> object:
    path = arg_str(a, 0).rstrip("/")
    if not path:
        return "/" if arg_str(a, 0) else "."
    return path.rsplit("/", 1)[-1]


@function("dirname", 1, 1, "all but the last element of a path (Go's filepath.Dir)")
def _dirname(ctx: Context, a: list[object]) -> object:
    path = arg_str(a, 0)
    return _go_clean(path[: path.rfind("/") + 1])


@function("fileexists", 1, 1, "whether a file exists, relative to the jobspec's directory")
def _fileexists(ctx: Context, a: list[object]) -> object:
    text = arg_str(a, 0)
    if ctx.bundle is not None and ctx.base_dir is None:
        return text in ctx.bundle
    path = _file_path(ctx, text)
    try:
        found = path.is_file()
    except OSError:
        return False
    if found:  # sent along, so that the agent sees the same answer
        ctx.read[text] = _read_file(path)
    return found


@function("pathexpand", 1, 1, "a leading ~ replaced by the home directory of the user running the parse")
def _pathexpand(ctx: Context, a: list[object]) -> object:
    """Nomad's jobspec2 `pathexpand` (go-homedir's Expand): a path not starting with `~` as it is; `~`
    or `~/rest` joined onto the home directory and cleaned; `~user/...` an error. The home directory
    is the one of the user running the parse: `$HOME`, else the passwd entry of the process's uid. A
    filesystem function as in Nomad: evaluated where the jobspec file is read (the CLI, `job
    validate`: the operator's home, as Nomad's CLI), refused for jobspecs given over the API (Nomad's
    HTTP parse runs with filesystem functions disabled), so the agent's home never leaks in."""
    path = arg_str(a, 0)
    _file_path(ctx, ".")  # over the API: refused as the other file functions
    if not path.startswith("~"):
        return path
    if len(path) > 1 and path[1] not in "/\\":
        raise EvalError(f"pathexpand: cannot expand user-specific home dir in {path!r}")
    home = os.environ.get("HOME") or _passwd_home()
    return _go_clean(home + "/" + path[1:])


def _passwd_home() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        raise EvalError("pathexpand: the home directory of the user running the parse is unknown") from None


def _file_path(ctx: Context, text: str) -> Path:
    if ctx.base_dir is None:
        raise EvalError(
            "file functions are not available here: the jobspec was not read from a file "
            "(jobspecs given over the API have no directory)"
        )
    if "\0" in text:
        raise EvalError("file: the path contains a NUL character")
    return ctx.base_dir / text
