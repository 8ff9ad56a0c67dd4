"""Folded stacks ("frame;frame;frame value" per line), the input format of Brendan Gregg's
flamegraph.pl, inferno and speedscope.

The stack of an instruction is its module, then the frames of its op_name name stack (which
carry the Flax module path and the jax transformations), then its opcode, then `[remat]` when
it is recomputation. The value is the instruction's total over all executions (loops multiplied by
their trip counts), so a flame graph shows where the exact FLOPs go. Lines are merged and sorted,
so the file is the same bytes on every run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hloflops.scopes import NO_SCOPE, split_scope

if TYPE_CHECKING:
    from hloflops.report.report import Report

METRICS = ("flops", "transcendentals", "bytes_accessed")


def _clean(frame: str) -> str:
    # ';' separates frames and the last ' ' separates the value: neither may appear inside one.
    return frame.replace(";", ",").replace(" ", "_").replace("\n", "_") or "_"


def stack_of(module_name: str, scope: str, opcode: str, remat: bool) -> tuple[str, ...]:
    frames = split_scope(scope) or (NO_SCOPE,)
    stack = (module_name, *frames, opcode)
    if remat:
        stack += ("[remat]",)
    return tuple(_clean(f) for f in stack)


def folded_stacks(report: Report, metric: str = "flops") -> str:
    """The report's `metric` as folded stacks, one line per distinct stack, zero lines omitted."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; choose one of {', '.join(METRICS)}")
    sums: dict[tuple[str, ...], int] = {}
    for row in report.rows:
        value = getattr(row.total, metric)
        if value <= 0:
            continue
        # A row only part of whose FLOPs is remat (`Row.remat_part`) puts that part under `[remat]`.
        # A negative share (the program without remat runs the op more often) shows none as remat.
        parts = ((False, value - max(row.remat_flops, 0)), (True, row.remat_flops)) \
            if metric == "flops" and row.remat_part is not None else ((row.remat, value),)
        for remat, part in parts:
            if part > 0:
                stack = stack_of(report.module_name or "module", row.scope, row.opcode, remat)
                sums[stack] = sums.get(stack, 0) + part
    lines = [f"{';'.join(stack)} {value}" for stack, value in sorted(sums.items())]
    return "\n".join(lines) + ("\n" if lines else "")
