"""Collection functions (lists, maps, sets)."""

from __future__ import annotations

import math

from agent.jobspec.hclfuncs.registry import arg_int, arg_list, arg_map, arg_num, arg_str, function
from agent.jobspec.hclvalues import (
    MAX_RANGE,
    MAX_VALUE_SIZE,
    Context,
    EvalError,
    a_word,
    as_set,
    distinct,
    equal,
    kind,
    number,
    to_bool,
    to_list,
    to_num,
    to_str,
)

# collections


@function("alltrue", 1, 1, "true when every item of a list is true (or the list is empty)")
def _alltrue(ctx: Context, a: list[object]) -> object:
    return all(to_bool(x, "list item") for x in arg_list(a, 0))


@function("anytrue", 1, 1, "true when any item of a list is true")
def _anytrue(ctx: Context, a: list[object]) -> object:
    return any(to_bool(x, "list item") for x in arg_list(a, 0))


@function("chunklist", 2, 2, "splits a list into lists of at most n items")
def _chunklist(ctx: Context, a: list[object]) -> object:
    items, size = arg_list(a, 0), arg_int(a, 1)
    if size < 0:
        raise EvalError("chunklist: the size must not be negative")
    if size == 0:
        return [items]
    return [items[i : i + size] for i in range(0, len(items), size)]


@function("coalesce", 1, None, "the first argument that is neither null nor an empty string")
def _coalesce(ctx: Context, a: list[object]) -> object:
    for x in a:
        if x is not None and x != "":
            return x
    raise EvalError("coalesce: no non-null, non-empty argument")


@function("coalescelist", 1, None, "the first argument that is a non-empty list")
def _coalescelist(ctx: Context, a: list[object]) -> object:
    for i in range(len(a)):
        if arg_list(a, i):
            return a[i]
    raise EvalError("coalescelist: no non-empty list")


@function("compact", 1, 1, "a list without its null and empty string items")
def _compact(ctx: Context, a: list[object]) -> object:
    return [x for x in arg_list(a, 0) if x is not None and x != ""]


@function("concat", 1, None, "joins lists into one")
def _concat(ctx: Context, a: list[object]) -> object:
    return [x for i in range(len(a)) for x in arg_list(a, i)]


@function("contains", 2, 2, "whether a list holds a value")
def _contains(ctx: Context, a: list[object]) -> object:
    return any(equal(x, a[1]) for x in arg_list(a, 0))


@function("distinct", 1, 1, "a list without its duplicates, in order")
def _distinct_fn(ctx: Context, a: list[object]) -> object:
    items = arg_list(a, 0)
    ctx.budget.tick(len(items) * len(items) // 16)
    return distinct(items)


@function("element", 2, 2, "a list item by index, wrapping around")
def _element(ctx: Context, a: list[object]) -> object:
    items, i = arg_list(a, 0), arg_int(a, 1)
    if not items:
        raise EvalError("element: the list is empty")
    if i < 0:
        raise EvalError("element: the index must not be negative")
    return items[i % len(items)]


@function("flatten", 1, 1, "replaces nested lists by their items")
def _flatten(ctx: Context, a: list[object]) -> object:
    out: list[object] = []

    def walk(items: list[object]) -> None:
        for x in items:
            ctx.budget.tick()
            if isinstance(x, list):
                walk(x)
            else:
                out.append(x)

    walk(arg_list(a, 0))
    return out


@function("index", 2, 2, "the index of a value in a list")
def _index(ctx: Context, a: list[object]) -> object:
    for i, x in enumerate(arg_list(a, 0)):
        if equal(x, a[1]):
            return i
    raise EvalError("index: the item is not in the list")


@function("keys", 1, 1, "a map's keys, sorted")
def _keys(ctx: Context, a: list[object]) -> object:
    return sorted(arg_map(a, 0))


@function("length", 1, 1, "the length of a string, list or map")
def _length(ctx: Context, a: list[object]) -> object:
    v = a[0]
    if isinstance(v, str | list | dict):
        return len(v)
    raise EvalError(f"length: the argument is {a_word(kind(v))}; a string, list or map is required")


@function("lookup", 2, 3, "a map's value by key, or a default")
def _lookup(ctx: Context, a: list[object]) -> object:
    m, key = arg_map(a, 0), arg_str(a, 1)
    if key in m:
        return m[key]
    if len(a) == 3:
        return a[2]
    raise EvalError(f'lookup: no key "{key}" in the map and no default')


@function("merge", 0, None, "merges maps; later keys win")
def _merge(ctx: Context, a: list[object]) -> object:
    out: dict[str, object] = {}
    for i, x in enumerate(a):
        if x is not None:
            out.update(arg_map(a, i))
    return out


@function("range", 1, 3, "a list of numbers: range(limit), range(start, limit), range(start, limit, step)")
def _range(ctx: Context, a: list[object]) -> object:
    nums = [arg_num(a, i) for i in range(len(a))]
    start: int | float = 0 if len(nums) == 1 else nums[0]
    limit = nums[0] if len(nums) == 1 else nums[1]
    step: int | float = 1
    if len(nums) == 3:
        step = nums[2]
    elif start > limit:
        step = -1
    if step == 0:
        raise EvalError("range: the step must not be zero")
    if (step > 0 and start > limit) or (step < 0 and start < limit):
        raise EvalError("range: the step goes away from the limit")
    count = math.ceil((limit - start) / step)
    if count > MAX_RANGE:
        raise EvalError(f"range: more than {MAX_RANGE} values")
    return [number(start + i * step) for i in range(count)]


@function("reverse", 1, 1, "a list in reverse order")
def _reverse(ctx: Context, a: list[object]) -> object:
    return arg_list(a, 0)[::-1]


def _sets(ctx: Context, a: list[object]) -> list[list[object]]:
    sets = [as_set(arg_list(a, i)) for i in range(len(a))]
    ctx.budget.tick(sum(len(s) for s in sets) ** 2 // 16)
    return sets


@function("setintersection", 1, None, "the items in every set")
def _setintersection(ctx: Context, a: list[object]) -> object:
    first, *rest = _sets(ctx, a)
    return as_set([x for x in first if all(any(equal(x, y) for y in s) for s in rest)])


@function("setproduct", 1, None, "every combination of one item of each set")
def _setproduct(ctx: Context, a: list[object]) -> object:
    sets = [arg_list(a, i) for i in range(len(a))]
    total = math.prod(len(s) for s in sets)
    if total * len(sets) * 8 > MAX_VALUE_SIZE:
        raise EvalError("setproduct: the result would be too large")
    out: list[list[object]] = [[]]
    for s in sets:
        out = [[*prefix, x] for prefix in out for x in s]
    return list(out)


@function("setsubtract", 2, 2, "the items of the first set not in the second")
def _setsubtract(ctx: Context, a: list[object]) -> object:
    first, second = _sets(ctx, a)
    return [x for x in first if not any(equal(x, y) for y in second)]


@function("setunion", 1, None, "the items in any set")
def _setunion(ctx: Context, a: list[object]) -> object:
    return as_set([x for s in _sets(ctx, a) for x in s])


@function("slice", 3, 3, "list items from a start index up to (not including) an end index")
def _slice(ctx: Context, a: list[object]) -> object:
    items, start, end = arg_list(a, 0), arg_int(a, 1), arg_int(a, 2)
    if not 0 <= start <= end <= len(items):
        raise EvalError(f"slice: indexes {start}..{end} are out of range for a list of {len(items)}")
    return items[start:end]


@function("sort", 1, 1, "a list of strings in lexicographic order")
def _sort(ctx: Context, a: list[object]) -> object:
    return sorted(to_str(x, "list item") for x in arg_list(a, 0))


@function("sum", 1, 1, "the sum of a list of numbers")
def _sum(ctx: Context, a: list[object]) -> object:
    items = arg_list(a, 0)
    if not items:
        raise EvalError("sum: the list is empty")
    return number(sum(to_num(x, "list item") for x in items))


@function("transpose", 1, 1, "swaps the keys and values of a map of lists of strings")
def _transpose(ctx: Context, a: list[object]) -> object:
    out: dict[str, list[object]] = {}
    for key, values in sorted(arg_map(a, 0).items()):
        for v in to_list(values, f'value of "{key}"'):
            out.setdefault(to_str(v, "list item"), []).append(key)
    return {k: sorted(v, key=str) for k, v in out.items()}


@function("values", 1, 1, "a map's values, by sorted key")
def _values(ctx: Context, a: list[object]) -> object:
    m = arg_map(a, 0)
    return [m[k] for k in sorted(m)]


@function("zipmap", 2, 2, "a map from a list of keys and a list of values")
def _zipmap(ctx: Context, a: list[object]) -> object:
    keys, values = arg_list(a, 0), arg_list(a, 1)
    if len(keys) != len(values):
        raise EvalError("zipmap: the lists have different lengths")
    return {to_str(k, "key"): v for k, v in zip(keys, values, strict=True)}
