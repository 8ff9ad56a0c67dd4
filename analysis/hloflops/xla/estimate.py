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

from hloflops.cost.costs import Cost
from hloflops.engine import XLA_KEYS, branch_max, evaluate
from hloflops.graph import bottom_up
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
    control = ev.graph.edge_subgraph(
        [(a, b, k) for a, b, k, role in ev.graph.edges(keys=True, data="role") if role in CallRole.CONTROL])
    order = [n for n in bottom_up(control, [module.entry_name]) if n in module.by_name]
    if module.entry_name not in order:
        order.append(module.entry_name)
    totals: dict[str, Cost] = {}
    for name in order:  # callees first
        comp = module.by_name[name]
        flops = transcendentals = bytes_accessed = 0
        for inst, own in zip(comp.instructions, ev.exact[name]):
            flops += own.cost.flops
            transcendentals += own.cost.transcendentals
            bytes_accessed += own.cost.bytes_accessed
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
    return totals[module.entry_name], tuple(_uncounted_depth_first(module, ev))


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
