"""What XLA's count misses, by loop and by conditional: rows that add up to exact - XLA.

XLA's `HloCostAnalysis` counts every while body and condition once, and a conditional's branches
by the largest of each key. Our view of that count ("once") costs each computation with every
loop inside it counted once; the rows below take the exact total down to it in steps, and
`residual` is what is left (once - XLA: the conditionals' per-key rule, custom-calls, float32
rounding; hloflops.xla.residual splits it).

Conditionals. The once view the loops are measured against ("once at the taken branches")
charges each conditional resolved per trip or constant (hloflops.loops.branches) its cheapest
branch among those the program takes, and each conditional decided at run time its dearest
branch (the one the totals count). A conditional's row is what moving from that branch to the
dearest changes in the once view (each conditional with those around it already moved and those
inside it at their dearest, so the rows add up): 0 for a conditional decided at run time, <= 0
otherwise (XLA's count of one trip takes a branch at least as dear as any the program takes).

Loops, innermost first. For a loop w whose computation runs m times exactly and m1 times in the
once view, with total E (every execution, everything inside) and once-view body and condition
cost O: the loop's inclusive miss is E x m1 / m - m1 x O (what its executions cost beyond XLA's
one count of its body and condition, per execution XLA sees), and its row ("XLA misses") is that
less the parts of its inner loops' inclusive misses that lie inside it. A computation called from
inside a loop and from outside any (or from two loops) splits its loops' m1, and so their
inclusive misses, by the loop around each call path, and each enclosing loop takes out its own
part. The rows of the loops then add up to the exact total less the once view at the taken
branches. With every trip count known and n >= 1 trips of w and of every loop around it, a row
lies in [0, E]: it is the loop's trips after the first (the first at its cheapest taken
branches), with the loops inside at their exact counts, and its condition's checks after the
first. A loop of 0 trips gets a negative row: XLA counts a body that never runs. Where the
executions of w differ (a conditional around it resolved per trip), E x m1 / m is rounded down
and the loop around it takes the fraction in its row.
"""

from __future__ import annotations

from typing import Mapping, Optional

from hloflops.cost.costs import ZERO, Cost
from hloflops.loops.branches import Resolution
from hloflops.loops.execution import ExecutionCounts, is_executing_site
from hloflops.results import Loop
from hloparse.ir import CallRole, Instruction, Module

RESIDUAL = "residual"
Loop_ = Optional[tuple[str, str]]  # a while by (its computation, its name); None: outside every loop


def _sites(inst: Instruction, known: Mapping[str, object]) -> list:
    return [s for s in inst.calls if is_executing_site(inst, s.role) and s.computation in known]


def once_costs(order: tuple[str, ...], own: Mapping[str, Cost], callers: Mapping[str, list[Instruction]],
               choice: Mapping[str, int]) -> dict[str, Cost]:
    """One execution of each computation with every loop inside it counted once (body and
    condition) and each multi-branch conditional at its branch in `choice`."""
    once: dict[str, Cost] = {}
    for name in reversed(order):  # callees first
        total = own.get(name, ZERO)
        for inst in callers.get(name, ()):
            for site in _sites(inst, once):
                if site.role != CallRole.BRANCH or _picked(inst, site.index, choice):
                    total = total + once[site.computation]
        once[name] = total
    return once


def once_executions(entry: str, order: tuple[str, ...], callers: Mapping[str, list[Instruction]],
                    choice: Mapping[str, int]) -> dict[str, dict[Loop_, int]]:
    """Executions of each computation with every loop body and condition run once per execution
    of its while and each conditional at its branch in `choice` (XLA's view of the program), by
    the innermost loop around them on the way there ((its computation, its name); None: none). A
    computation called from inside a loop and from outside one has executions in both."""
    runs: dict[str, dict[Loop_, int]] = {name: {} for name in order}
    runs[entry] = {None: 1}
    for name in order:  # callers first
        for inst in callers.get(name, ()):
            for site in _sites(inst, runs):
                if site.role == CallRole.BRANCH and not _picked(inst, site.index, choice):
                    continue
                target = runs[site.computation]
                in_loop = site.role in (CallRole.WHILE_BODY, CallRole.WHILE_CONDITION)
                for context, n in runs[name].items():
                    key = (name, inst.name) if in_loop else context
                    target[key] = target.get(key, 0) + n
    return runs


def _picked(inst: Instruction, index: int, choice: Mapping[str, int]) -> bool:
    return inst.name not in choice or choice[inst.name] == index


def taken_choice(callers: Mapping[str, list[Instruction]], dearest: Mapping[str, int],
                 resolutions: Mapping[str, Resolution], once: Mapping[str, Cost]) -> dict[str, int]:
    """Each conditional's branch in the once view at the taken branches: a resolved one's
    cheapest taken branch (by flops in the once view; any branch if it never runs), the others'
    dearest."""
    choice = dict(dearest)
    for name in once:  # the computations reachable from ENTRY
        for inst in callers.get(name, ()):
            resolution = resolutions.get(inst.name)
            if inst.name not in choice or resolution is None or not resolution.resolved or not resolution.counts:
                continue
            arms = {s.index: s.computation for s in inst.calls if s.role == CallRole.BRANCH}
            if not all(c in once for c in arms.values()):
                continue
            taken = [b for b, n in enumerate(resolution.counts) if n and b in arms] or list(arms)
            choice[inst.name] = min(taken, key=lambda b: (once[arms[b]].flops, b))
    return choice


def xla_misses(module: Module, ex: ExecutionCounts, own: Mapping[str, Cost],
               callers: Mapping[str, list[Instruction]], loops: list[Loop], dearest: Mapping[str, int],
               resolutions: Mapping[str, Resolution]) -> tuple[dict[tuple[str, str], Cost], dict[str, int]]:
    """((loop's computation, loop) -> its row as a Cost, conditional -> its row in flops, zero
    rows left out); see the module docstring. `dearest` is the accounting's branch per conditional (most flops)."""
    if not loops and not dearest:
        # Rows come from loops and from conditionals whose branch differs from `dearest`'s (the
        # branches chosen below are `dearest`'s keys): a module with neither has none, and the
        # walks below over every computation (an unrolled model has tens of thousands) are not needed.
        return {}, {}
    order = ex.order
    once_dear = once_costs(order, own, callers, dearest)
    choice = taken_choice(callers, dearest, resolutions, once_dear)
    once = once_costs(order, own, callers, choice) if choice != dearest else once_dear
    runs = once_executions(module.entry_name, order, callers, choice)

    rows: dict[str, int] = {}
    for where in order:
        for inst in callers.get(where, ()):
            if inst.name in choice and choice[inst.name] != dearest.get(inst.name):
                arms = {s.index: s.computation for s in inst.calls if s.role == CallRole.BRANCH}
                change = (once_dear[arms[dearest[inst.name]]].flops - once_dear[arms[choice[inst.name]]].flops)
                times = sum(runs.get(where, {}).values())
                if times and change:
                    rows[inst.name] = rows.get(inst.name, 0) - times * change

    # Each loop's inclusive miss, split by the loop around it (per context: a computation called
    # inside one loop and outside any has executions in both); a loop's row is its inclusive miss
    # less the parts of its inner loops' that lie in it. Loops are keyed by (computation, name):
    # a hand-written module may give two whiles one name.
    inclusive: dict[tuple[str, str], Cost] = {}
    parts: list[tuple[Loop_, Cost]] = []
    for lp in loops:
        seen = once.get(lp.body, ZERO) + once.get(lp.condition, ZERO)
        total = ZERO
        for context, m1 in runs.get(lp.computation, {}).items():
            share = _scaled_down(lp.total, m1, lp.executions) if lp.executions else ZERO
            part = share + seen.scaled(-m1)
            parts.append((context, part))
            total = total + part
        inclusive[(lp.computation, lp.name)] = total
    misses = dict(inclusive)
    for context, part in parts:
        if context in misses:
            misses[context] = misses[context] + part.scaled(-1)
    return misses, rows


def _scaled_down(cost: Cost, times: int, over: int) -> Cost:
    return Cost(cost.flops * times // over, cost.transcendentals * times // over, cost.bytes_accessed * times // over)
