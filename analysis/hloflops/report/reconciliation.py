"""The summary's reconciliation with XLA: one row per entry of `reconciliation` (loops,
conditionals, residual) and their sum, exact - XLA (hloflops.reconciliation says what each is).

Shown as a table where a conditional has a row; otherwise the loop table's "XLA misses" column
and the one line of the residual (where it is not 0) add up to exact - XLA."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hloflops.report.format import format_table
from hloflops.xla.residual import residual_text

if TYPE_CHECKING:
    from hloflops.report.report import Report

RESIDUAL = "residual"


def reconciliation_lines(report: Report) -> list[str]:
    rec = report.accounting.reconciliation
    loops = {lp.name for lp in report.loops}
    conditionals = [k for k in rec if k != RESIDUAL and k not in loops]
    if not conditionals:  # the loop table's column and this line add up to exact - XLA
        residual = rec.get(RESIDUAL)
        if not residual:
            return []
        causes = residual_text(report.residual_causes)
        return [f"reconciliation residual (not explained by loops): {residual:,} flops"
                + (f": {causes}" if causes else "")]
    unknown = {lp.name: lp.bounds[0] for lp in report.loops if lp.trip_count is None}
    rows = [[f"  {name}", f"{rec[name]:,}", f"loop, trip count unknown: at its lower bound {unknown[name]:,}"
             if name in unknown else "loop: the trips XLA does not count (the loop table's XLA misses)"]
            for name in rec if name in loops]
    rows += [[f"  {name}", f"{rec[name]:,}", "conditional: XLA counts its dearest branch, the program takes cheaper"]
             for name in conditionals]
    causes = residual_text(report.residual_causes) if rec.get(RESIDUAL) else ""
    rows.append([f"  {RESIDUAL}", f"{rec.get(RESIDUAL, 0):,}", causes or "what no loop or conditional explains"])
    rows.append(["  = exact - XLA", f"{sum(rec.values()):,}", ""])
    return ["", "reconciliation with XLA (flops; the rows add up to exact - XLA):",
            *format_table(["  entry", "flops", "what"], rows, align="lrl")]
