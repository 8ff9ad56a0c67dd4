"""The summary's lines about conditionals: how each was resolved and, where the program decides
at run time, the range the totals lie in ("between A and B", and which conditional)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hloflops.report.report import Report

METRIC_LABELS = (("flops", "flops"), ("transcendentals", "transcendentals"), ("bytes_accessed", "bytes accessed"))
NAMED = 3  # conditionals named in a one-line reason


def _between(low: int, high: int | None) -> str:
    return f"between {low:,} and {high:,}" if high is not None else f"at least {low:,}"


def range_reason(report: Report) -> str | None:
    """Why the totals are a range (the conditionals decided at run time), or None when none is."""
    unresolved = report.unresolved_conditionals
    if not unresolved:
        return None
    # A conditional on the counter of a loop whose trip count is unknown is decided by that count
    # (the formula's notes say how), not by data: said apart.
    counted = [c for c in unresolved if getattr(c, "waits_on", None)]
    data = [c for c in unresolved if not getattr(c, "waits_on", None)]
    parts = []
    if data:
        parts.append(f"{len(data):,} conditional(s) decided at run time ({_names(data)})")
    if counted:
        parts.append(f"{len(counted):,} conditional(s) on the counter of a loop of unknown trip count "
                     f"({_names(counted)})")
    return "; ".join(parts)


def _names(conditionals: list[Any]) -> str:
    return ", ".join(c.name for c in conditionals[:NAMED]) + (", ..." if len(conditionals) > NAMED else "")


def range_text(report: Report) -> str | None:
    """'flops between A and B (why)', or None when the totals are not a range of conditionals."""
    reason = range_reason(report)
    if reason is None:
        return None
    return f"flops {_between(*report.flops_bounds)} ({reason})"


def range_lines(report: Report) -> list[str]:
    """The summary's note on a range: every metric's low and high end, and why."""
    reason = range_reason(report)
    if reason is None:
        return []
    bounds = {"flops": report.flops_bounds, "transcendentals": report.transcendentals_bounds,
              "bytes_accessed": report.bytes_accessed_bounds}
    ranges = ", ".join(f"{label} {_between(*bounds[key])}" for key, label in METRIC_LABELS)
    return [f"NOTE: totals are a RANGE: {reason}: {ranges} "
            "(each conditional's cheapest to dearest branch; the table shows the dearest)"]


def _executions(c: Any) -> str:
    executions = getattr(c, "branch_executions", ())
    if not executions or executions[0] is None:
        return f"counted {c.chosen} (the dearest), smallest {c.smallest}"
    return "runs " + ", ".join(f"{b.index}: x{n:,}" for b, n in zip(c.branches, executions))


def conditional_lines(report: Report) -> list[str]:
    if not report.conditionals:
        return []
    lines = ["", f"conditionals ({len(report.conditionals)}): resolved ones count each branch for the executions "
                 "that take it; the others count the branch with the most FLOPs"]
    for c in report.conditionals:
        costs = ", ".join(f"{b.index}: {b.cost.flops:,}" for b in c.branches)
        resolution = getattr(c, "resolution", "data")
        note = getattr(c, "note", "")
        loc = report.instruction_source(c.computation, c.name)  # the user's line (hloflops.user_code)
        where = f" at {loc.file}:{loc.line}" if loc is not None else ""
        lines.append(f"  {c.name}{where} x{c.executions:,} [{resolution}]: branch flops {{{costs}}}; {_executions(c)}"
                     + (f" ({note})" if note else ""))
    return lines
