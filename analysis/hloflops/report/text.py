"""The readable summary `hloflops FILE` prints (and `Report.summary()` returns)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from hloflops.cost.attention import ATTENTION, CONVENTION_LINES
from hloflops.report.compiler_estimate import summary_lines as compiler_estimate_lines
from hloflops.report.communication import sharded_lines
from hloflops.report.conditionals import conditional_lines, range_lines
from hloflops.report.fit import elide_middle, fit_text
from hloflops.report.format import format_table, ratio
from hloflops.report.formulas import formula_lines
from hloflops.report.reconciliation import reconciliation_lines

NO_FRAMES_NOTE = ("this module has no stack-frame tables (FileNames ... StackFrames): each op has only the one "
                  "location its metadata names, which may be library code")

if TYPE_CHECKING:
    from hloflops.report.report import Report

MAX_UNCOUNTED_LINES = 12  # beyond this the summary groups uncounted ops by kind


def _num(value: float | int) -> str:
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)  # XLA's float32 estimate of a count beyond float range
        return f"{value:,.0f}" if value == int(value) else f"{value:,.1f}"
    return f"{value:,}"


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{share * 100:.1f}%"


def unknown_trip_text(bounds: tuple[int, int | None]) -> str:
    low, high = bounds
    if high is not None:
        return f"UNKNOWN ({low:,}..{high:,})"
    return f"UNKNOWN (>={low:,})" if low else "UNKNOWN"


def _attention_lines(report: Report) -> list[str]:
    """The fused attention share and the convention it was counted by (nothing without any)."""
    group = next((g for g in report.by_opcode() if g.key == ATTENTION), None)
    if group is None:
        return []
    share = _pct(ratio(group.total.flops, report.flops))
    lines = ["", f"attention: {group.instructions:,} fused ops, {group.total.flops:,} flops ({share} of the total),",
             *("  " + ("counted by the " if i == 0 else "") + line for i, line in enumerate(CONVENTION_LINES))]
    bounded = sum(1 for r in report.rows if r.note and "upper bound" in r.note)
    if bounded:
        lines.append(f"  {bounded:,} of them have runtime padding lengths: counted at full length (an upper bound)")
    return lines


def render_summary(report: Report, *, by: str = "scope", depth: int | None = 3, top: int = 15,
                   chip: Any = None, width: int | None = None, frames: str = "user") -> str:
    """The summary; with `width` (`hloflops.report.fit.output_width()`), its name columns are
    elided in the middle to fit it."""
    xla = report.xla_estimate
    lines = [f"module {report.module_name}" + (f"  ({report.path})" if report.path else "")]
    if report.unknown_loops or report.uncounted or not getattr(report.accounting, "executions_known", True):
        lines.append("NOTE: totals are LOWER BOUNDS: some trip counts or op costs are unknown (see below)")
    lines += range_lines(report)
    lines.append("")
    header = ["", "exact (loop-aware)", "XLA cost_analysis", "exact / XLA"]
    if report.xla_reported is not None:
        header.insert(3, "XLA via jax")
    table = []
    for label, key, exact in (
        ("flops", "flops", report.flops),
        ("transcendentals", "transcendentals", report.transcendentals),
        ("bytes accessed", "bytes_accessed", report.bytes_accessed),
    ):
        r = ratio(exact, xla[key])
        cells = [label, _num(exact), _num(xla[key]), "-" if r is None else f"{r:.2f}x"]
        if report.xla_reported is not None:
            live = report.xla_reported.get(key, report.xla_reported.get(key.replace("_", " "), 0.0))
            cells.insert(3, _num(float(live)))
        table.append(cells)
    lines += format_table(header, table)
    lines.append("")
    overhead = report.remat_overhead
    lines.append(
        f"model flops {report.model_flops:,}   remat flops {report.remat_flops:,}"
        + (f"   remat overhead +{overhead * 100:.1f}% over model flops" if overhead is not None else "")
    )
    low, high = report.remat_flops_bounds
    if (low, high) != (report.remat_flops, report.remat_flops):
        hinges = report.remat_hinges
        lines.append(f"remat flops between {low:,} and {high:,}: the split hinges on {len(hinges):,} ops "
                     f"({sum(h.flops for h in hinges if h.counted and not h.twin_copies):,} flops counted as remat "
                     f"without an equal value, "
                     f"{sum(h.flops for h in hinges if not h.counted and not h.twin_copies and not h.twin_form):,} "
                     f"remat-named without a twin, counted as model"
                     + (f", {sum(h.flops for h in hinges if h.twin_copies):,} in copies the program without remat "
                        f"makes beyond this one's" if any(h.twin_copies for h in hinges) else "")
                     + (f", {sum(h.flops for h in hinges if h.twin_form):,} in weight gradients the program without "
                        f"remat may write in their other form" if any(h.twin_form for h in hinges) else "") + ")"
                     + (": the remat split may be low" if high > report.remat_flops else ""))
    stores = report.remat_twin_stores
    if stores:
        lines.append(f"the program without remat would also run {sum(s.executions for s in stores):,} "
                     + " and ".join(sorted({s.opcode for s in stores}))
                     + f"s storing bf16 residuals ({sum(s.flops for s in stores):,} flops, taken off remat flops)")
    phases = report.phase_flops
    lines.append(
        "phases: " + "   ".join(f"{p} {phases[p]:,} ({_pct(ratio(phases[p], report.flops))})" for p in phases)
    )
    lines.append("")
    if report.loops:
        lines.append(f"loops ({len(report.loops)}): XLA counts each body once; these are multiplied")
        rows = []
        for lp in report.loops:
            known = lp.trip_count is not None
            rows.append(
                [
                    lp.name,
                    f"{lp.trip_count:,}" if known else unknown_trip_text(lp.bounds),
                    lp.source,
                    f"{lp.executions:,}",
                    f"{lp.total.flops:,}" if known else f">={lp.total.flops:,}",
                    _pct(report.loop_share(lp)),
                    f"{lp.extra_over_xla.flops:,}" if known else "?",  # a lower bound minus XLA means nothing
                    lp.parent or "",
                    lp.phase,
                    lp.scope,
                    report.loop_location(lp),  # the user's line (hloflops.user_code)
                ]
            )
        header = ["  loop", "trip count", "source", "executions", "flops", "share", "XLA misses", "inside", "phase",
                  "scope", "code"]
        # narrow: the scope (with its source line) is elided first, then these columns go, least needed first
        lines += format_table(header, [["  " + r[0]] + r[1:] for r in rows], align="lrlrrrrllll", width=width,
                              elide=(10, 9, 7, 0), drop=(7, 8, 2, 3, 6))
        for lp in report.loops:
            if lp.trip_count is None:
                lines.append(f"  ! {lp.name}: trip count unknown{': ' + lp.note if lp.note else ''} "
                             f"(give it with --trip-count {lp.name}=N)")
        if report.formula is not None:
            lines += formula_lines(report.formula)
    else:
        lines.append("loops: none")
    lines += conditional_lines(report)
    lines += _attention_lines(report)
    lines.append("")
    sharded = sharded_lines(report, chip)
    lines += sharded + ([""] if sharded else [])
    estimate = compiler_estimate_lines(report, report.chip_spec(chip))
    lines += estimate + ([""] if estimate else [])
    groups = report.group_by(by, depth=depth if by in ("scope", "module") else None, frames=frames)
    title = f"top {min(top, len(groups))} of {len(groups)} by {by}"
    if by in ("scope", "module"):
        title += f" (depth {'all' if depth is None else depth})"
    if by in ("source", "function") and frames != "user":
        title += f" ({frames} frames)"
    lines.append(title)
    if by in ("source", "function") and not report.has_stack_frames:
        lines.append(f"  note: {NO_FRAMES_NOTE}")
    rows = [
        [
            "  " + g.key,
            f"{g.total.flops:,}",
            _pct(ratio(g.total.flops, report.flops)),
            f"{g.remat_flops:,}",
            f"{g.total.transcendentals:,}",
            f"{g.total.bytes_accessed:,}",
        ]
        for g in groups[:top]
    ]
    lines += format_table([f"  {by}", "flops", "share", "remat flops", "transcendentals", "bytes accessed"], rows,
                          width=width, elide=(0,), drop=(4, 5, 3))
    lines.append("")
    if report.uncounted:
        lines.append(f"UNCOUNTED ops ({len(report.uncounted)}): their cost is unknown and NOT in the totals")
        if len(report.uncounted) <= MAX_UNCOUNTED_LINES:
            for u in report.uncounted:
                target = f" target={u.target}" if u.target else ""
                lines.append(f"  ! {u.name} ({u.opcode}{target}) in {u.computation} x{u.executions:,}: {u.reason}")
        else:  # many: one line per kind, with a few names (all of them are in --json)
            kinds: dict[tuple[str, str, str], list[str]] = {}
            for u in report.uncounted:
                kinds.setdefault((u.opcode, u.target or "", u.reason), []).append(u.name)
            for (opcode, target, reason), names in sorted(kinds.items(), key=lambda kv: (-len(kv[1]), kv[0])):
                shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
                what = opcode + (f" target={target}" if target else "")
                lines.append(f"  ! {len(names):,} x {what}: {reason} ({shown})")
    else:
        lines.append("uncounted ops: none")
    lines += reconciliation_lines(report)  # loops, conditionals and residual: rows adding up to exact - XLA
    if width is not None:
        lines[0] = elide_middle(lines[0], width)
    return fit_text("\n".join(lines) + "\n", width)
