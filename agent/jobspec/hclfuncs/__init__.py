"""HCL2 values, types and the functions of Nomad's jobspec2 (Terraform's standard library subset).

Values are plain Python data: str, int/float (HCL numbers; whole floats become ints), bool, None (null),
list (HCL lists, tuples and sets; sets are de-duplicated and sorted), dict (maps and objects). Every
failure is an `EvalError` with a message; results are bounded (`MAX_VALUE_SIZE`, `Budget`).

`FUNCTIONS` maps a name to (implementation, min args, max args or None); `can`, `try` and `convert` take
unevaluated arguments and live in the evaluator (agent.jobspec.hcleval). `REFUSED` names the functions
recognised but refused, with the reason.

The functions live by family in this package (strings, collections, encoding, crypto, net); importing
it registers them all. The values and types are agent.jobspec.hclvalues."""

from agent.jobspec.hclfuncs import collection, crypto, encoding, net, strings
from agent.jobspec.hclfuncs.registry import DESCRIPTIONS, FUNCTIONS, REFUSED, Fn
from agent.jobspec.hclfuncs.strings import go_format

__all__ = [
    "DESCRIPTIONS",
    "FUNCTIONS",
    "REFUSED",
    "Fn",
    "collection",
    "crypto",
    "encoding",
    "go_format",
    "net",
    "strings",
]
