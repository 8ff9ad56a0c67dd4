"""Predict the dict XLA's `compiled.cost_analysis()` returns, without XLA.

The per-instruction values come from the same rules as our exact count (`hloflops.cost.rules`); what
this module adds is XLA's arithmetic, which is float32 (C++ `float`) throughout:
- each instruction's values are float32 (an int64 count is rounded when it is assigned; the
  default bytes are a float running sum over result then operands);
- an applied body's total is multiplied by its count in float32 (`sub * count`);
- each computation is summed in post-order DFS (unreachable roots first, then the root;
  operands left to right, then control predecessors), into one float32 running sum per key;
- a nested computation (fusion body, call, while body and condition, branch, async) is summed
  by a fresh analysis and its totals are handed back to the calling instruction as one value;
- every while body and condition counts once (XLA ignores trip counts);
- each custom-call adds -1 to flops, bytes accessed and optimal_seconds.
Only non-zero keys are returned, as XLA does. The diagnostic keys (`bytes accessed0{}`, ...)
are not predicted.
"""

from __future__ import annotations

from typing import Mapping

from hloflops.cost.costs import Cost, OpCost
from hloflops.engine import XLA_KEYS, branch_max, evaluate
from hloflops.graph import call_table, module_bottom_up
from hloparse.ir import CallRole, Module

FLOPS, TRANSCENDENTALS, BYTES, OPTIMAL_SECONDS = XLA_KEYS
KEYS = XLA_KEYS


class EstimateUnavailable(ValueError):
    """XLA's number cannot be predicted for this module: an opcode no rule knows (XLA's parser
    would refuse the module) or an instruction XLA itself cannot cost (it aborts on those)."""


def xla_estimate(module: Module, *, diagnostics: bool = False) -> dict[str, float]:
    """XLA's cost dict for the module's ENTRY computation (loops counted once). With
    `diagnostics`, also XLA's per-operand keys (`bytes accessed0{}`, `utilization0{}`,
    `bytes accessedout{}`, ...), so the whole dict can be compared."""
    try:
        totals = evaluate(module, diagnostics=diagnostics).xla_total(module.entry)
    except ValueError as why:
        raise EstimateUnavailable(str(why)) from None
    return {k: float(v) for k, v in totals.items() if v != 0}


def loop_once_totals(module: Module, view: str = "xla") -> tuple[Cost, tuple[str, ...]]:
    """XLA's traversal in exact integers: every instruction reachable from ENTRY through
    CONTROL edges, each while body and condition once, a conditional by the per-key maximum over
    its branches. With view="xla" this is XLA's total before float32 rounding; with
    view="exact" custom-calls are costed where known. Returns (total, reasons for every
    uncounted instruction, in the order a depth-first walk from ENTRY meets them)."""
    ev = evaluate(module, view=view)
    return loop_once_total(module, ev.exact), tuple(_uncounted_depth_first(module, ev))


def loop_once_total(module: Module, costs: Mapping[str, list[OpCost]]) -> Cost:
    """`loop_once_totals`' total from the per-instruction costs of one view (`Evaluation.exact`),
    callees before callers over the call table (networkx's graph and its sort cost several times
    this sum on a large module)."""
    by_name = module.by_name
    totals: dict[str, Cost] = {}
    for name in _control_bottom_up(module):  # callees first
        comp = by_name[name]
        own = [op.cost for op in costs[name]]
        flops = sum([c.flops for c in own])
        transcendentals = sum([c.transcendentals for c in own])
        bytes_accessed = sum([c.bytes_accessed for c in own])
        for inst in comp.instructions:
            if not inst.calls:
                continue
            branches = []
            for site in inst.calls:
                if site.role not in CallRole.CONTROL:
                    continue
                sub = totals[site.computation]
                if site.role == CallRole.BRANCH:
                    branches.append(sub)
                else:
                    flops += sub.flops
                    transcendentals += sub.transcendentals
                    bytes_accessed += sub.bytes_accessed
            if branches:
                flops += branch_max([b.flops for b in branches])
                transcendentals += branch_max([b.transcendentals for b in branches])
                bytes_accessed += branch_max([b.bytes_accessed for b in branches])
        totals[name] = Cost(flops, transcendentals, bytes_accessed)
    return totals[module.entry_name]


def _control_bottom_up(module: Module) -> list[str]:
    """The computations reachable from ENTRY through CONTROL call sites, each callee before its
    callers (module_bottom_up's order, which holds every computation, kept to those)."""
    calls = call_table(module).calls
    reached = {module.entry_name}
    stack = [module.entry_name]
    while stack:
        for callee, site in calls.get(stack.pop(), ()):
            if site["role"] in CallRole.CONTROL and callee not in reached:
                reached.add(callee)
                stack.append(callee)
    return [name for name in module_bottom_up(module) if name in reached and name in module.by_name]


def _uncounted_depth_first(module: Module, ev) -> list[str]:
    """Each uncounted instruction once, met by a depth-first walk from ENTRY (an explicit stack:
    any nesting depth)."""
    def events(name: str):
        comp = module.by_name[name]
        for inst, own in zip(comp.instructions, ev.exact[name]):
            if own.uncounted is not None:
                yield f"{name}/{inst.name}: {own.uncounted}"
            for site in inst.calls:
                if site.role in CallRole.CONTROL:
                    yield site
    found: list[str] = []
    seen = {module.entry_name}
    stack = [events(module.entry_name)]
    while stack:
        event = next(stack[-1], None)
        if event is None:
            stack.pop()
        elif isinstance(event, str):
            found.append(event)
        elif event.computation not in seen:
            seen.add(event.computation)
            stack.append(events(event.computation))
    return found
