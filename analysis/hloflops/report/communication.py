"""The communication view of a report: bytes each device sends over the interconnect, by
opcode, by loop (nested loops included in their parents) and by scope, and the collectives whose
bytes are unknown. The per-row figures come from hloflops.cost.communication."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hloflops.cost.communication import SENDERS
from hloflops.cost.fused_collectives import fused_roles
from hloflops.scopes import scope_prefix

if TYPE_CHECKING:
    from hloflops.report.report import Report


def by_opcode(report: Report) -> dict[str, dict[str, int]]:
    """Every collective that sends, by opcode (those that move nothing, n = 1, included). A
    collective fused into a TPU fusion counts as what it does there: the copies of an async
    collective not at all (its start fusion's copy is the op), an all-reduce-scatter fusion's
    all-reduce as a reduce-scatter."""
    roles = fused_roles(report.module) if report.module is not None else {}
    table: dict[str, dict[str, int]] = {}
    for row in report.rows:
        if row.opcode not in SENDERS:
            continue
        role = roles.get((row.computation, row.name)) if roles else None
        if role is not None and role.kind == "async copy":
            continue
        key = "reduce-scatter" if role is not None and role.kind == "reduce-scatter" else row.opcode
        entry = table.setdefault(key, {"ops": 0, "executions": 0, "bytes_per_device": 0})
        entry["ops"] += 1
        entry["executions"] += row.executions
        entry["bytes_per_device"] += row.communication_total
    return dict(sorted(table.items()))


def by_loop(report: Report) -> dict[str, int]:
    """Loop -> bytes sent by everything it runs, the loops inside it included."""
    parent = {lp.name: lp.parent for lp in report.loops}
    totals = {lp.name: 0 for lp in report.loops}
    for row in report.rows:
        sent = row.communication_total
        loop = row.loop
        while sent and loop is not None and loop in totals:
            totals[loop] += sent
            loop = parent.get(loop)
    return totals


def by_scope(report: Report, depth: int | None = None) -> dict[str, int]:
    table: dict[str, int] = {}
    for row in report.rows:
        if row.communication:
            key = scope_prefix(row.scope, depth)
            table[key] = table.get(key, 0) + row.communication_total
    return dict(sorted(table.items(), key=lambda kv: (-kv[1], kv[0])))


def uncounted(report: Report) -> list[dict[str, Any]]:
    return [
        {"name": r.name, "opcode": r.opcode, "computation": r.computation,
         "reason": r.communication_uncounted, "executions": r.executions}
        for r in report.rows if r.communication_uncounted
    ]


def communication_dict(report: Report, depth: int | None = None) -> dict[str, Any]:
    """The `communication` object of `Report.to_dict()`."""
    return {
        "bytes_per_device": report.communication_bytes,
        "by_opcode": by_opcode(report),
        "by_loop": {k: v for k, v in by_loop(report).items() if v},
        "by_scope": by_scope(report, depth),
        "uncounted": uncounted(report),
    }


def summary_lines(report: Report) -> list[str]:
    """The summary's communication block (nothing for a program without collectives)."""
    ops = by_opcode(report)
    if not ops:
        return []
    lines = [f"communication: {report.communication_bytes:,} bytes sent per device "
             f"({report.devices:,} devices; global flops {report.global_flops:,})"]
    for opcode, entry in ops.items():
        lines.append(f"  {opcode:<24} {entry['ops']:>4} ops  x{entry['executions']:>6,} executions  "
                     f"{entry['bytes_per_device']:>16,} bytes")
    for loop, sent in by_loop(report).items():
        if sent:
            lines.append(f"  in loop {loop}: {sent:,} bytes")
    for item in uncounted(report):
        lines.append(f"  ! {item['name']} ({item['opcode']}) in {item['computation']}: {item['reason']}")
    return lines


def sharded_lines(report: Report, chip: Any = None) -> list[str]:
    """Communication lines, then the roofline's when a chip is given (text summary and HTML)."""
    lines = summary_lines(report)
    if chip is not None:
        from hloflops.report.roofline import summary_lines as roofline_lines

        lines += roofline_lines(report.roofline(chip))
    return lines
