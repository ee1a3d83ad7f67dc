"""A job's and a group's `reschedule` blocks -> agent.structs.model.ReschedulePolicy of each group, as Nomad
canonicalises them (api/tasks.go TaskGroup.Canonicalize: the job's block copied, the group's fields
merged over it, the job type's defaults under both) and checks them (nomad/structs ReschedulePolicy
.Validate and Job.Validate, their texts). A system or sysbatch job has no policy: a block is refused,
as Nomad refuses it.

What one node does with the policy (agent.decide.reschedule.plan_reschedule,
agent.client.allocs.AllocRegistry.replace): a failed alloc is replaced on this node, the only one,
after the policy's delay, while its attempts last."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent.jobspec.tree import Body
from agent.structs.model import ReschedulePolicy

if TYPE_CHECKING:
    from agent.jobspec.reader import BodyReader

DELAY_FUNCTIONS = ("constant", "exponential", "fibonacci")  # Nomad's RescheduleDelayFunctions
MIN_INTERVAL = 15.0  # Nomad's ReschedulePolicyMinInterval
MIN_DELAY = 5.0  # Nomad's ReschedulePolicyMinDelay
SYSTEM_TYPES = ("system", "sysbatch")
# Nomad's DefaultServiceJobReschedulePolicy / DefaultBatchJobReschedulePolicy (api
# NewDefaultReschedulePolicy: the zero values of the other fields written out)
DEFAULTS = {
    "service": ReschedulePolicy(0, 0.0, 30.0, "exponential", 3600.0, True),
    "batch": ReschedulePolicy(1, 86400.0, 5.0, "constant", 0.0, False),
}
_DURATIONS = ("interval", "delay", "max_delay")
_NO_POLICY = "System or sysbatch jobs should not have a reschedule policy"


def read_reschedule(builder: BodyReader, body: Body, path: str) -> dict[str, Any]:
    """The fields a `reschedule` block of `body` sets (none when it has no such block)."""
    found = builder._single(body, "reschedule", path)
    if found is None:
        return {}
    rb, rpath = found
    given: dict[str, Any] = {"path": rpath}
    for name in _DURATIONS:
        if rb.get(name) is not None:
            given[name] = builder._duration(rb, name, rpath, 0.0)
    if rb.get("attempts") is not None:
        given["attempts"] = builder._int(rb, "attempts", rpath, 0)
    if rb.get("unlimited") is not None:
        given["unlimited"] = builder._bool(rb, "unlimited", rpath, False)
    if rb.get("delay_function") is not None:
        given["delay_function"] = builder._str(rb, "delay_function", rpath, "")
    return given


def group_reschedule(
    builder: BodyReader, job_type: str, job_given: dict[str, Any], group_given: dict[str, Any]
) -> ReschedulePolicy | None:
    """The group's policy: its own fields over the job's over the type's defaults, validated; None
    for a system or sysbatch job (a block there is refused)."""
    if job_type in SYSTEM_TYPES:
        for where in sorted({str(g["path"]) for g in (job_given, group_given) if g}):
            builder.report.error(where, _NO_POLICY)
        return None
    merged = {k: v for k, v in {**job_given, **group_given}.items() if k != "path"}
    policy = ReschedulePolicy(**{**vars(DEFAULTS[job_type]), **merged})
    where = str(group_given.get("path") or job_given.get("path") or "")
    if where:
        for reason in invalid(policy):
            builder.report.error(str(where), reason)
    return policy


def go_duration(seconds: float) -> str:
    """Go's time.Duration String() of whole milliseconds and more: "5s", "1m30s", "1h0m0s"."""
    ms = round(seconds * 1000)
    if ms == 0:
        return "0s"
    sign, ms = ("-", -ms) if ms < 0 else ("", ms)
    if ms < 1000:  # below a second Go writes milliseconds
        return f"{sign}{ms}ms"
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs = f"{ms // 1000}.{ms % 1000:03d}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{secs}"
    return f"{sign}{minutes}m{secs}" if minutes else sign + secs


def invalid(r: ReschedulePolicy) -> list[str]:
    """Each reason of Nomad's ReschedulePolicy.Validate the policy breaks (none when disabled)."""
    if not r.enabled:
        return []
    out: list[str] = []
    if r.attempts > 0:
        if r.interval <= 0:
            out.append("Interval must be a non zero value if Attempts > 0")
        if r.unlimited:
            out.append(
                f"Reschedule Policy with Attempts = {r.attempts}, Interval = {go_duration(r.interval)}, "
                f"and Unlimited = {str(r.unlimited).lower()} is ambiguous"
            )
            out.append("If Attempts >0, Unlimited cannot also be set to true")
    checked = True
    if r.delay < MIN_DELAY:
        out.append(f"Delay cannot be less than {go_duration(MIN_DELAY)} (got {go_duration(r.delay)})")
        checked = False
    if r.delay_function not in DELAY_FUNCTIONS:
        shown = " ".join(f'"{f}"' for f in DELAY_FUNCTIONS)
        out.append(f'Invalid delay function "{r.delay_function}", must be one of [{shown}]')
        checked = False
    if r.delay_function != "constant":
        if r.max_delay < MIN_DELAY:  # Nomad's text shows the delay here
            out.append(f"Max Delay cannot be less than {go_duration(MIN_DELAY)} (got {go_duration(r.delay)})")
            checked = False
        if r.max_delay < r.delay:
            out.append(
                f"Max Delay cannot be less than Delay {go_duration(r.delay)} (got {go_duration(r.max_delay)})"
            )
            checked = False
    if not r.unlimited:
        if r.interval < MIN_INTERVAL:
            out.append(
                f"Interval cannot be less than {go_duration(MIN_INTERVAL)} (got {go_duration(r.interval)})"
            )
        if checked:
            out += _delay_params(r)
    return out


def _delay_params(r: ReschedulePolicy) -> list[str]:
    """Nomad's validateDelayParams: the attempts fit in the interval with the delays they wait."""
    ok, possible, recommended = _viable_attempts(r)
    if ok:
        return []
    head = f"Nomad can only make {possible} attempts in {go_duration(r.interval)} with initial delay "
    if r.delay_function == "constant":
        first = f'{head}{go_duration(r.delay)} and delay function "{r.delay_function}"'
    else:
        first = (
            f'{head}{go_duration(r.delay)}, delay function "{r.delay_function}", and delay ceiling '
            f"{go_duration(r.max_delay)}"
        )
    return [
        first,
        f"Set the interval to at least {go_duration(round(recommended))} to accommodate "
        f"{r.attempts} attempts",
    ]


def _viable_attempts(r: ReschedulePolicy) -> tuple[bool, int, float]:
    """Nomad's viableAttempts: (valid, attempts possible, the interval they would need)."""
    if r.delay_function == "constant":
        recommended = r.attempts * r.delay
        if r.interval < recommended:
            return False, int(r.interval // r.delay), recommended
        return True, 0, recommended
    if r.delay_function == "exponential":
        possible, recommended = 0, 0.0
        for i in range(r.attempts):
            nxt = 2**i * r.delay
            recommended = recommended + r.max_delay if nxt > r.max_delay else nxt
            possible += recommended < r.interval
        return possible >= r.attempts, possible, recommended
    return _viable_fibonacci(r)


def _viable_fibonacci(r: ReschedulePolicy) -> tuple[bool, int, float]:
    slots, ceiling = [r.delay, r.delay], False
    for i in range(2, r.attempts):
        if ceiling:
            nxt = slots[i - 1] + r.max_delay
        else:
            nxt = slots[i - 1] + slots[i - 2]
            if nxt > r.max_delay:
                nxt, ceiling = r.max_delay, True
        slots.append(nxt)
    if r.interval >= slots[-1]:
        return True, 0, slots[-1]
    return False, next((i for i, s in enumerate(slots) if s > r.interval), 0), slots[-1]
