"""The table the function families register into: name -> (implementation, min args, max args or None),
with a one-line description; the functions recognised but refused, with the reason; argument readers."""

from __future__ import annotations

from collections.abc import Callable

from agent.jobspec.hclvalues import Context, to_int, to_list, to_map, to_num, to_str

# --- the functions -------------------------------------------------------------------------------------

Fn = Callable[[Context, list[object]], object]
FUNCTIONS: dict[str, tuple[Fn, int, int | None]] = {}
REFUSED: dict[str, str] = {
    "list": "list() was removed from HCL; use tolist([...]) or a list [...]",
    "map": "map() was removed from HCL; use tomap({...}) or an object {...}",
    "rsadecrypt": "not supported by fieldlab-agent",
    "fileset": "not supported by fieldlab-agent",
    "filebase64": "not supported by fieldlab-agent",
    "templatefile": "not supported by fieldlab-agent",
    # Nomad's CLI evaluates these on the user's machine; here the jobspec is evaluated on the agent,
    # whose home and working dir are not the user's: refused rather than answered wrong
    "abspath": "not supported by fieldlab-agent: the agent, not your shell, evaluates the jobspec"
    " (write the path out, or pass it with -var)",
}
DESCRIPTIONS: dict[str, str] = {}


def function(name: str, lo: int, hi: int | None, doc: str) -> Callable[[Fn], Fn]:
    def register(f: Fn) -> Fn:
        FUNCTIONS[name] = (f, lo, hi)
        DESCRIPTIONS[name] = doc
        return f

    return register


def arg_str(args: list[object], i: int) -> str:
    return to_str(args[i], f"argument {i + 1}")


def arg_num(args: list[object], i: int) -> int | float:
    return to_num(args[i], f"argument {i + 1}")


def arg_int(args: list[object], i: int) -> int:
    return to_int(args[i], f"argument {i + 1}")


def arg_list(args: list[object], i: int) -> list[object]:
    return to_list(args[i], f"argument {i + 1}")


def arg_map(args: list[object], i: int) -> dict[str, object]:
    return to_map(args[i], f"argument {i + 1}")
