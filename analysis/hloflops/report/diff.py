"""`hloflops diff A B`: how the exact costs changed between two modules, in total and per group
(scope by default), with a FLOPs budget for CI (`--fail-above PCT`)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hloflops.cost.costs import Cost
from hloflops.report.conditionals import range_lines
from hloflops.report.fit import fit_text
from hloflops.report.format import format_table

if TYPE_CHECKING:
    from hloflops.report.report import Report

METRICS = ("flops", "transcendentals", "bytes_accessed", "model_flops", "remat_flops")


def growth_percent(old: int, new: int) -> float:
    """How much `new` exceeds `old`, in percent (inf when old is 0 and new is not)."""
    if old == 0:
        return 0.0 if new == 0 else math.inf
    return (new - old) * 100.0 / old


def _pct_text(value: float) -> str:
    if math.isinf(value):
        return "+inf%"
    return f"{value:+.2f}%"


@dataclass(frozen=True, slots=True)
class GroupDelta:
    key: str
    a: Cost
    b: Cost
    a_remat_flops: int
    b_remat_flops: int

    @property
    def delta(self) -> Cost:
        return Cost(
            self.b.flops - self.a.flops,
            self.b.transcendentals - self.a.transcendentals,
            self.b.bytes_accessed - self.a.bytes_accessed,
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "a": self.a.as_dict(),
            "b": self.b.as_dict(),
            "delta": self.delta.as_dict(),
            "remat_flops": {"a": self.a_remat_flops, "b": self.b_remat_flops},
        }


@dataclass(frozen=True)
class DiffResult:
    a: Report
    b: Report
    by: str
    depth: int | None
    groups: tuple[GroupDelta, ...]  # largest |FLOPs delta| first

    def totals(self) -> dict[str, dict[str, int | float | None]]:
        out: dict[str, dict[str, int | float | None]] = {}
        for metric in METRICS:
            old, new = getattr(self.a, metric), getattr(self.b, metric)
            pct = growth_percent(old, new)
            percent = None if math.isinf(pct) else round(pct, 6)
            out[metric] = {"a": old, "b": new, "delta": new - old, "percent": percent}
        return out

    @property
    def flops_growth(self) -> float:
        return growth_percent(self.a.flops, self.b.flops)

    def flops_growth_text(self) -> str:
        return _pct_text(self.flops_growth)

    def exceeds(self, fail_above: float) -> bool:
        """True when B's FLOPs exceed A's by more than `fail_above` percent."""
        return self.flops_growth > fail_above

    def to_dict(self, *, fail_above: float | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "a": {"module": self.a.module_name, "path": self.a.path, "exact": self.a.is_exact},
            "b": {"module": self.b.module_name, "path": self.b.path, "exact": self.b.is_exact},
            "by": self.by,
            "depth": self.depth,
            "totals": self.totals(),
            "groups": {g.key: g.as_dict() for g in self.groups},
            "loops": {
                "a": [{"name": lp.name, "trip_count": lp.trip_count} for lp in self.a.loops],
                "b": [{"name": lp.name, "trip_count": lp.trip_count} for lp in self.b.loops],
            },
        }
        if fail_above is not None:
            out["fail_above_percent"] = fail_above
            out["budget_exceeded"] = self.exceeds(fail_above)
        return out

    def to_json(self, *, fail_above: float | None = None) -> str:
        return json.dumps(self.to_dict(fail_above=fail_above), sort_keys=True, indent=2) + "\n"


def diff_reports(a: Report, b: Report, *, by: str = "scope", depth: int | None = 3) -> DiffResult:
    old = {g.key: g for g in a.group_by(by, depth=depth)}
    new = {g.key: g for g in b.group_by(by, depth=depth)}
    deltas = []
    for key in sorted(set(old) | set(new)):
        ga, gb = old.get(key), new.get(key)
        deltas.append(
            GroupDelta(
                key=key,
                a=ga.total if ga else Cost(),
                b=gb.total if gb else Cost(),
                a_remat_flops=ga.remat_flops if ga else 0,
                b_remat_flops=gb.remat_flops if gb else 0,
            )
        )
    deltas.sort(key=lambda d: (-abs(d.delta.flops), -abs(d.delta.bytes_accessed), d.key))
    return DiffResult(a=a, b=b, by=by, depth=depth, groups=tuple(deltas))


def render_diff(result: DiffResult, *, top: int = 20, fail_above: float | None = None,
                width: int | None = None) -> str:
    a, b = result.a, result.b
    lines = [f"A: {a.module_name}" + (f"  ({a.path})" if a.path else ""),
             f"B: {b.module_name}" + (f"  ({b.path})" if b.path else ""), ""]
    if any(r.unknown_loops or r.uncounted for r in (a, b)):
        lines += ["NOTE: some totals are lower bounds (unknown trip counts or uncounted ops)", ""]
    for label, report in (("A", a), ("B", b)):  # conditionals decided at run time: a range
        lines += [f"NOTE: {label}: {line.removeprefix('NOTE: ')}" for line in range_lines(report)]
    rows = []
    for metric, t in result.totals().items():
        pct = growth_percent(int(t["a"]), int(t["b"]))  # type: ignore[arg-type]
        rows.append([metric.replace("_", " "), f"{t['a']:,}", f"{t['b']:,}", f"{t['delta']:+,}", _pct_text(pct)])
    lines += format_table(["", "A", "B", "delta", "change"], rows)
    for label, report in (("A", a), ("B", b)):
        loops = ", ".join(f"{lp.name} x{'?' if lp.trip_count is None else f'{lp.trip_count:,}'}" for lp in report.loops)
        lines.append(f"loops in {label}: {loops or 'none'}")
    lines.append("")
    changed = [g for g in result.groups if g.delta != Cost()]
    depth = "all" if result.depth is None else result.depth  # None: the whole name stack
    title = f"by {result.by}" + (f" (depth {depth})" if result.by in ("scope", "module") else "")
    lines.append(f"{title}: {len(changed)} of {len(result.groups)} changed, largest FLOPs change first")
    rows = [
        ["  " + g.key, f"{g.a.flops:,}", f"{g.b.flops:,}", f"{g.delta.flops:+,}", f"{g.delta.bytes_accessed:+,}"]
        for g in changed[:top]
    ]
    lines += format_table([f"  {result.by}", "A flops", "B flops", "delta flops", "delta bytes"], rows, width=width,
                          elide=(0,), drop=(4,))
    if fail_above is not None:
        verdict = "EXCEEDED" if result.exceeds(fail_above) else "ok"
        lines += ["", f"budget: FLOPs change {result.flops_growth_text()} vs allowed +{fail_above:g}%: {verdict}"]
    return fit_text("\n".join(lines) + "\n", width)
