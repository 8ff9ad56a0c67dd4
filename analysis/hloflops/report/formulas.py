"""The report's view of `hloflops.loops.formula`: the JSON keys and the summary lines.

JSON (only when some trip count under ENTRY is unknown; absent otherwise, where the totals are
the whole answer):

    flops_formula, transcendentals_formula, bytes_accessed_formula
        [{"coefficient": int, "symbols": ["while.3", ...]}, ...]: the total is the sum of each
        coefficient times the product of its symbols' trip counts; the term without symbols is
        the constant. Terms with a zero coefficient are left out (an all-zero metric is []).
    formula_symbols
        [{"name": "while.3", "bounds": [lower, upper or null], "note": why it is unknown}, ...]
    formula_bounds
        {"flops": [at the lower bounds, at the upper bounds or null], "transcendentals": [...],
         "bytes_accessed": [...]}: the totals at the symbols' proved bounds (`evaluate` there;
        the polynomial grows with every symbol); the lower end equals the headline totals.
    formula_notes
        where the polynomial holds only for some counts (a conditional whose branch holds an
        unknown loop: `Report.evaluate` is exact there, the polynomial keeps one branch), or only
        as an upper bound (a conditional reading an unknown loop's counter: the polynomial counts
        its dearest branch on every trip, `Report.evaluate` takes its branch per trip).
    formula_upper_bound
        true where the polynomial is an upper bound (the summary prints `<=` instead of `=`).

Resolved conditionals (their branch per trip known, hloflops.loops.branches) are followed per
trip: the polynomial counts each branch for the trips that take it, as the totals do.
"""

from __future__ import annotations

from typing import Any

from hloflops.loops.formula import METRICS, Formula


FORMULA_KEYS = (*(f"{metric}_formula" for metric in METRICS), "formula_symbols", "formula_bounds", "formula_notes",
                "formula_upper_bound")


def formula_json(formula: Formula) -> dict[str, Any]:
    out: dict[str, Any] = {
        f"{metric}_formula": [{"coefficient": c, "symbols": list(symbols)} for c, symbols in
                              formula.metric_terms(metric)]
        for metric in METRICS
    }
    out["formula_symbols"] = [{"name": s.name, "bounds": [s.lower, s.upper], "note": s.note}
                              for s in formula.symbols]
    low, high = formula.at_lower_bounds(), formula.at_upper_bounds()
    out["formula_bounds"] = {m: [getattr(low, m), getattr(high, m) if high is not None else None] for m in METRICS}
    out["formula_notes"] = list(formula.notes)
    out["formula_upper_bound"] = formula.upper_bound
    return out


def polynomial_text(terms: list[tuple[int, tuple[str, ...]]]) -> str:
    """`262,158 x N[while.3] + 1` (0 when there is no term)."""
    if not terms:
        return "0"
    text = ""
    for k, (c, symbols) in enumerate(terms):
        term = " x ".join([f"{abs(c) if k else c:,}", *(f"N[{s}]" for s in symbols)])
        text += term if not k else (f" - {term}" if c < 0 else f" + {term}")
    return text


def formula_lines(formula: Formula) -> list[str]:
    names = ", ".join(f"N[{s.name}]" for s in formula.symbols)
    lines = ["", f"totals in the unknown trip counts ({names}: body executions per execution of the loop):"]
    relation = "<=" if formula.upper_bound else "="
    for metric in METRICS:
        lines.append(f"  {metric} {relation} {polynomial_text(formula.metric_terms(metric))}")
    for s in formula.symbols:
        high = "unbounded" if s.upper is None else f"<= {s.upper:,}"
        lines.append(f"  N[{s.name}] >= {s.lower:,}, {high}")
    high_totals = formula.at_upper_bounds()
    if high_totals is not None:
        low = formula.at_lower_bounds()
        lines.append(f"  at those bounds: flops {low.flops:,} .. {high_totals.flops:,}, "
                     f"bytes accessed {low.bytes_accessed:,} .. {high_totals.bytes_accessed:,}")
    lines += [f"  ! {note}" for note in formula.notes]
    return lines
