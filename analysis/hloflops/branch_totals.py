"""What resolved and unresolved conditionals do to the accounting's totals.

- A conditional resolved per trip (hloflops.loops.branches) is counted in the inclusive costs at
  its *anchor* (`anchored_by_computation`): one execution of the anchor runs it `sum(counts)`
  times, `counts[b]` of them taking branch b, so the anchor's cost is exact while the
  computations between (a loop body whose iterations differ) keep their dearest branch. The
  loops between get their totals from the execution counts instead (`loop_totals`).
- The reconciliation entry of each resolved conditional is hloflops.reconciliation's.
- `bounds`: where conditionals stay unresolved (the program decides at run time), each metric is a
  range: low takes every such conditional's cheapest branch for that metric, high its dearest,
  each metric on its own (one pass of the inclusive costs per metric and end).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Mapping

from hloflops.cost.costs import Cost
from hloflops.graph import call_table
from hloflops.loops.branches import Resolution
from hloflops.loops.execution import ExecutionCounts
from hloflops.results import Loop
from hloparse.ir import CallRole, Instruction, Module

Anchored = Mapping[str, list[tuple[Instruction, Resolution]]]
METRICS = ("flops", "transcendentals", "bytes_accessed")


def conditional_sites(module: Module, names: Mapping[str, Any]) -> dict[str, tuple[str, Instruction]]:
    """Conditional name -> (its computation, the instruction), for the names given."""
    found: dict[str, tuple[str, Instruction]] = {}
    for caller, pairs in call_table(module).calls.items():
        for _, site in pairs:
            inst = site["instruction"]
            if site["role"] == CallRole.BRANCH and inst.name in names:
                found.setdefault(inst.name, (caller, inst))
    return found


def anchored_by_computation(module: Module, resolutions: Mapping[str, Resolution]) -> dict[str, list]:
    """Anchor computation -> the resolved conditionals it accounts, with their resolutions."""
    resolved = {name: r for name, r in resolutions.items() if r.resolved and r.counts and r.anchor}
    anchored: dict[str, list[tuple[Instruction, Resolution]]] = {}
    for name, (_, inst) in sorted(conditional_sites(module, resolved).items()):
        anchored.setdefault(resolved[name].anchor, []).append((inst, resolved[name]))
    return anchored


def loop_totals(module: Module, ex: ExecutionCounts, own: Mapping[str, Cost],
                resolutions: Mapping[str, Resolution]) -> dict[str, Cost]:
    """Loops whose iterations differ (from a conditional resolved per trip inside them up to its
    anchor loop) -> their totals over the program, summed from the execution counts."""
    sites = conditional_sites(module, {n: r for n, r in resolutions.items() if r.kind == "per-trip"})
    varying: set[str] = set()
    for name, (computation, _) in sites.items():
        loop = ex.loop_of.get(computation)
        while loop is not None:
            varying.add(loop)
            if ex.while_sites.get(loop) == resolutions[name].anchor:
                break
            loop = ex.parent_loop(loop)
    if not varying:
        return {}
    totals: dict[str, list[Cost]] = {name: [] for name in varying}
    for computation in ex.order:
        runs = ex.of(computation)
        loop = ex.loop_of.get(computation)
        while loop is not None:
            if loop in totals and runs:
                totals[loop].append(own.get(computation, Cost()).scaled(runs))
            loop = ex.parent_loop(loop)
    return {name: _sum(costs) for name, costs in totals.items()}


def varying_loops(loops: list[Loop], totals: Mapping[str, Cost]) -> list[Loop]:
    """The loops with their totals from `loop_totals` (body_cost keeps the dearest iteration)."""
    note = "iterations differ (a conditional inside takes its branch per trip): body_cost counts the dearest branch"
    return [replace(lp, total=totals[lp.name], note=f"{lp.note}; {note}" if lp.note else note)
            if lp.name in totals else lp for lp in loops]


def bounds(total: Cost, lower: Cost, resolutions: Mapping[str, Resolution],
           inclusive: Callable[..., Any], entry: str, *,
           bounded: bool) -> tuple[Cost, dict[str, tuple[int, int | None]]]:
    """(the low end of every metric as a Cost, metric -> (low, high)). `total` and `lower` are the
    entry's inclusive costs picking the most / fewest flops; `inclusive(pick_max, rank)` makes
    another pass. High is None where `bounded` is false (an unknown trip count, an uncounted op)."""
    if all(r.resolved for r in resolutions.values()):
        low = lower
    else:
        low_by = {"flops": lower.flops}
        high_by = {"flops": total.flops}
        for metric in METRICS[1:]:
            rank = _by(metric)
            low_by[metric] = getattr(inclusive(False, rank).exact[entry], metric)
            high_by[metric] = getattr(inclusive(True, rank).exact[entry], metric)
        low = Cost(low_by["flops"], low_by["transcendentals"], low_by["bytes_accessed"])
        total = Cost(high_by["flops"], high_by["transcendentals"], high_by["bytes_accessed"])
    ranges = {m: (getattr(low, m), getattr(total, m) if bounded else None) for m in METRICS}
    return low, ranges


def _by(metric: str) -> Callable[[Cost], tuple[int, ...]]:
    return lambda cost: (getattr(cost, metric),)


def _sum(costs: list[Cost]) -> Cost:
    return Cost(sum(c.flops for c in costs), sum(c.transcendentals for c in costs),
                sum(c.bytes_accessed for c in costs))


def unresolved_conditionals(conditionals: Any) -> list[Any]:
    """The conditionals the program decides at run time (what makes a total a range)."""
    return [c for c in conditionals if getattr(c, "resolution", "data") not in ("constant", "per-trip")]
