"""The rules every report must keep where loops and conditionals meet (issue 29), as a checker.

`violations(module)` analyses a module and returns one line per broken rule (empty: all hold):

1. formula: where some trip count is unknown, the formula evaluated at the symbols' lower bounds
   equals the totals, and evaluated at other counts (each symbol at lower + 1, and all at 3)
   equals the accounting given those counts (`account(trip_counts=...)`), for flops,
   transcendentals and bytes accessed; and the polynomial printed equals `evaluate()` wherever
   the formula does not say (in `notes`) that it holds only as a bound;
2. reconciliation: the entries add up to exact - XLA, and each loop's entry ("XLA misses") lies
   in [0, the loop's total] when its trip count is known, it runs (executions >= 1) and its body
   runs at least once (a loop of 0 trips is over-counted by XLA: its entry is negative);
3. bounds: the low end of each metric's range is at most the total, the high end (where there is
   one) at least it.

`check(module)` raises AssertionError with every line. The module is plain Python (no pytest):
the tests run it over the corpus and over generated programs, and so can a benchmark script.
"""

from __future__ import annotations

from typing import Mapping

from hloflops.accounting import RESIDUAL, LoopAccounting, account
from hloflops.loops.formula import METRICS
from hloparse.ir import Module


def _totals(acc: LoopAccounting) -> dict[str, int]:
    return {m: getattr(acc.total, m) for m in METRICS}


def formula_violations(module: Module, acc: LoopAccounting, extra_counts: int = 3) -> list[str]:
    formula = acc.formula
    if formula is None:
        return []
    found: list[str] = []
    low = {s.name: s.lower for s in formula.symbols}
    at_low = formula.evaluate(low).as_dict()
    if at_low != _totals(acc):
        found.append(f"formula at the lower bounds {at_low} != totals {_totals(acc)}")
    trials: list[Mapping[str, int]] = [{n: v + 1 for n, v in low.items()},
                                       {n: max(v, extra_counts) for n, v in low.items()}]
    for counts in trials:
        if any(s.upper is not None and counts[s.name] > s.upper for s in formula.symbols):
            continue
        got = formula.evaluate(counts).as_dict()
        want = _totals(account(module, trip_counts=dict(counts)))
        if got != want:
            found.append(f"formula at {dict(counts)} gives {got}, account(trip_counts=...) gives {want}")
        if not formula.bound_only:
            poly = formula.polynomial_at(counts).as_dict()
            if poly != got:
                found.append(f"the polynomial at {dict(counts)} gives {poly}, evaluate() {got}, "
                             "and the formula does not say it is a bound")
    return found


def reconciliation_violations(acc: LoopAccounting) -> list[str]:
    found: list[str] = []
    rec = acc.reconciliation
    if acc.xla_estimate:
        xla = int(acc.xla_estimate.get("flops", 0))
        if sum(rec.values()) != acc.total.flops - xla:
            found.append(f"reconciliation sums to {sum(rec.values()):,}, exact - XLA is {acc.total.flops - xla:,}")
    by_name: dict[str, int] = {}
    for loop in acc.loops:  # two loops sharing a name (a hand-written module) share an entry
        by_name[loop.name] = by_name.get(loop.name, 0) + loop.extra_over_xla.flops
    if any(rec.get(name, 0) != value for name, value in by_name.items()):
        found.append(f"the loops' XLA misses {by_name} are not their reconciliation entries")
    for loop in acc.loops:
        if loop.trip_count is None or loop.trip_count < 1 or loop.executions < 1:
            continue
        misses = loop.extra_over_xla.flops
        if not 0 <= misses <= loop.total.flops:
            found.append(f"{loop.name} ({loop.trip_count} trips): XLA misses {misses:,} "
                         f"outside [0, {loop.total.flops:,}]")
    if RESIDUAL not in rec:
        found.append("no residual entry in the reconciliation")
    return found


def bounds_violations(acc: LoopAccounting) -> list[str]:
    found: list[str] = []
    for metric in METRICS:
        low, high = acc.bounds.get(metric, (getattr(acc.total, metric), None))
        value = getattr(acc.total, metric)
        if low > value or (high is not None and high < value):
            found.append(f"{metric} bounds [{low:,}, {high}] do not hold the total {value:,}")
    return found


def violations(module: Module, acc: LoopAccounting | None = None) -> list[str]:
    acc = acc if acc is not None else account(module)
    return formula_violations(module, acc) + reconciliation_violations(acc) + bounds_violations(acc)


def check(module: Module, acc: LoopAccounting | None = None) -> None:
    found = violations(module, acc)
    if found:
        raise AssertionError(f"{module.name}: " + "; ".join(found))
