"""Predict the dict XLA's `compiled.cost_analysis()` returns, without XLA.

The per-instruction values come from the same rules as our exact count (`analysis.cost.rules`); what
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

from fractions import Fraction

import numpy as np

from analysis.cost import rules
from analysis.xla import diagnostics as xla_diagnostics
from analysis.cost.costs import Cost
from hloparse.ir import CallRole, Computation, Instruction, Module

F32 = np.float32
FLOPS = "flops"
TRANSCENDENTALS = "transcendentals"
BYTES = "bytes accessed"
OPTIMAL_SECONDS = "optimal_seconds"
KEYS = (FLOPS, TRANSCENDENTALS, BYTES, OPTIMAL_SECONDS)


class EstimateUnavailable(ValueError):
    """XLA's number cannot be predicted for this module: an opcode no rule knows (XLA's parser
    would refuse the module) or an instruction XLA itself cannot cost (it aborts on those)."""


def xla_estimate(module: Module, *, diagnostics: bool = False) -> dict[str, float]:
    """XLA's cost dict for the module's ENTRY computation (loops counted once). With
    `diagnostics`, also XLA's per-operand keys (`bytes accessed0{}`, `utilization0{}`,
    `bytes accessedout{}`, ...), so the whole dict can be compared."""
    totals = _Estimator(module, diagnostics).computation(module.entry)
    keys = totals if diagnostics else KEYS
    return {k: float(totals[k]) for k in keys if totals.get(k, 0) != 0}


def f32(value: int | Fraction | float) -> np.float32:
    """A count assigned to a C++ float (round to nearest even)."""
    if isinstance(value, Fraction):
        return F32(float(value))
    return F32(value)


def visit_order(computation: Computation) -> list[Instruction]:
    """HloComputation::Accept's order: each unreachable root (an instruction nobody uses that
    is not the root), then the root, each in post-order DFS with operands left to right."""
    by_name = computation.by_name
    used: set[str] = set()
    for inst in computation.instructions:
        used.update(inst.operands)
        used.update(_control_predecessors(inst))
    starts = [i for i in computation.instructions if i.name not in used and i is not computation.root]
    starts.append(computation.root)
    order: list[Instruction] = []
    done: set[str] = set()
    for start in starts:
        if start.name in done:
            continue
        stack: list[tuple[Instruction, bool]] = [(start, False)]
        expanding: set[str] = set()
        while stack:
            inst, expanded = stack.pop()
            if inst.name in done:
                continue
            if expanded:
                done.add(inst.name)
                order.append(inst)
                continue
            if inst.name in expanding:
                continue  # a cycle would be malformed HLO; XLA rejects it
            expanding.add(inst.name)
            stack.append((inst, True))
            children = [by_name[o] for o in inst.operands if o in by_name]
            children += [by_name[p] for p in _control_predecessors(inst) if p in by_name]
            for child in reversed(children):
                if child.name not in done:
                    stack.append((child, False))
    return order


def _control_predecessors(inst: Instruction) -> tuple[str, ...]:
    raw = inst.attributes.get("control-predecessors")
    if not raw:
        return ()
    body = raw.strip().strip("{}")
    return tuple(p.strip().lstrip("%") for p in body.split(",") if p.strip())


class _Estimator:
    def __init__(self, module: Module, diagnostics: bool = False) -> None:
        self.module = module
        self.diagnostics = diagnostics
        self.cache: dict[str, dict[str, np.float32]] = {}

    def computation(self, comp: Computation) -> dict[str, np.float32]:
        """Totals of one fresh nested analysis of `comp` (cached: the result does not depend on
        the caller)."""
        cached = self.cache.get(comp.name)
        if cached is not None:
            return cached
        sums = {k: F32(0) for k in KEYS}
        for inst in visit_order(comp):
            props = self.instruction(comp, inst)
            for k, v in props.items():
                sums[k] = F32(sums.get(k, F32(0)) + v)
        self.cache[comp.name] = sums
        return sums

    def instruction(self, comp: Computation, inst: Instruction) -> dict[str, np.float32]:
        try:
            charge = rules.charge_of(self.module, comp, inst)  # any other exception is an engine bug
        except rules.MalformedInstruction as bad:
            raise EstimateUnavailable(f"{inst.name!r} (line {inst.line}): {bad}") from bad
        if charge is None:
            raise EstimateUnavailable(f"no rule for opcode {inst.opcode!r} ({inst.name}, line {inst.line})")
        if charge.nested is None:
            props = self._own(charge)
            if self.diagnostics:
                props.update(_f32_keys(xla_diagnostics.own_keys(charge, comp, inst)))
            return props
        callees = [self.module.computation(s.computation) for s in inst.calls if s.role in CallRole.CONTROL]
        if charge.nested == rules.NESTED_FUSION:
            props = dict(self.computation(callees[0]))
            total = F32(0)
            for term in charge.bytes_terms:
                total = F32(total + f32(term))
            props[BYTES] = total
            props[OPTIMAL_SECONDS] = F32(0)  # recomputed from (absent) rates
            if self.diagnostics:
                props.update(_f32_keys(xla_diagnostics.fusion_keys(self.module, inst, callees[0])))
            return props
        if charge.nested == rules.NESTED_CALL:
            return dict(self.computation(callees[0]))
        if charge.nested == rules.NESTED_ASYNC:
            props = dict(self.computation(callees[0]))
            props[OPTIMAL_SECONDS] = F32(0)
            return props
        if charge.nested == rules.NESTED_WHILE:
            body = self.computation(self.module.computation(inst.called(CallRole.WHILE_BODY)[0]))
            cond = self.computation(self.module.computation(inst.called(CallRole.WHILE_CONDITION)[0]))
            keys = dict.fromkeys(list(body) + list(cond))
            return {k: F32(F32(F32(0) + body.get(k, F32(0))) + cond.get(k, F32(0))) for k in keys}
        if charge.nested == rules.NESTED_CONDITIONAL:
            branches = [self.module.computation(n) for n in inst.called(CallRole.BRANCH)]
            props = dict(self.computation(branches[0]))
            for branch in branches[1:]:
                other = self.computation(branch)
                for k, v in other.items():
                    if v != 0:  # XLA's Properties::ForEach skips zero values
                        props[k] = max(props.get(k, F32(0)), v)
            return props
        raise ValueError(f"unknown nesting {charge.nested!r}")

    def _own(self, charge: rules.Charge) -> dict[str, np.float32]:
        props: dict[str, np.float32] = {}
        flops = f32(charge.flops)
        transcendentals = f32(charge.transcendentals)
        for applied in charge.applied:
            body = self.computation(self.module.computation(applied.computation))
            count = f32(applied.count)
            flops = F32(flops + F32(body[FLOPS] * count))
            transcendentals = F32(transcendentals + F32(body[TRANSCENDENTALS] * count))
        total = F32(0)
        for term in charge.bytes_terms:
            total = F32(total + f32(term))
        props[FLOPS] = flops
        props[TRANSCENDENTALS] = transcendentals
        props[BYTES] = total
        props[OPTIMAL_SECONDS] = f32(charge.optimal_seconds)
        return props


def loop_once_totals(module: Module, view: str = "xla") -> tuple[Cost, tuple[str, ...]]:
    """XLA's traversal in exact integers: every instruction reachable from ENTRY through
    CONTROL edges, each while body and condition once, a conditional by the per-key maximum over
    its branches. With view="xla" this is XLA's total before float32 rounding; with
    view="exact" custom-calls are costed where known. Returns (total, reasons for every
    uncounted instruction)."""
    uncounted: list[str] = []
    cache: dict[str, Cost] = {}

    def total(comp: Computation) -> Cost:
        if comp.name in cache:
            return cache[comp.name]
        flops = transcendentals = bytes_accessed = 0
        for inst in comp.instructions:
            own = rules.own_cost(module, comp, inst, view=view)
            if own.uncounted is not None:
                uncounted.append(f"{comp.name}/{inst.name}: {own.uncounted}")
            flops += own.cost.flops
            transcendentals += own.cost.transcendentals
            bytes_accessed += own.cost.bytes_accessed
            branches = []
            for site in inst.calls:
                if site.role not in CallRole.CONTROL:
                    continue
                sub = total(module.computation(site.computation))
                if site.role == CallRole.BRANCH:
                    branches.append(sub)
                else:
                    flops += sub.flops
                    transcendentals += sub.transcendentals
                    bytes_accessed += sub.bytes_accessed
            if branches:
                flops += rules.branch_max([b.flops for b in branches])
                transcendentals += rules.branch_max([b.transcendentals for b in branches])
                bytes_accessed += rules.branch_max([b.bytes_accessed for b in branches])
        cache[comp.name] = Cost(flops, transcendentals, bytes_accessed)
        return cache[comp.name]

    return total(module.entry), tuple(uncounted)



def _f32_keys(keys: dict[str, float]) -> dict[str, np.float32]:
    return {k: f32(v) for k, v in keys.items()}
