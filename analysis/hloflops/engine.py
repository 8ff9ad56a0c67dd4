"""The one pass: every instruction of a module costed once, by its rule, in both views.

    ev = evaluate(module)
    ev.exact[computation][i]     # OpCost of instruction i (text order), the exact view
    ev.xla_total(module.entry)   # XLA's float32 totals of the ENTRY computation (loops once)

The pass walks the call graph (`hloflops.graph.call_table`) bottom-up, callees before callers, without
recursion. For each instruction it asks the opcode's rule (`hloflops.cost.rules`) for its
`Charge` once and reads from it:
- the exact view (`OpCost`): what the accounting multiplies by the executions;
- XLA's view as XLA computes it: float32 values (`hloflops.xla.float32`), an applied body's
  totals times its count, a CONTROL callee's totals handed back to the calling instruction,
  each computation summed in XLA's visit order (`hloflops.xla.order`); see hloflops.xla.estimate;
- with `diagnostics`, XLA's per-operand keys too.
Each computation also gets its exact totals for one run of it as an APPLIED body (reducers,
`xla_builder.*` composites): flops and transcendentals, CONTROL callees included (a
conditional's branches by their per-key maximum).
"""

from __future__ import annotations

import weakref
from collections import Counter
from fractions import Fraction
from operator import attrgetter, or_
from typing import TYPE_CHECKING, Any, NamedTuple, Sequence

from hloflops.cost.classes import structure_key
from hloflops.cost.costs import ZERO, Cost, OpCost
from hloflops.cost.registry import OPERANDS, RULES, Charge, Ctx
from hloflops.cost.rules import NESTED_ASYNC, NESTED_CALL, NESTED_CONDITIONAL, NESTED_FUSION, NESTED_WHILE
from hloflops.cost.rules import LOCAL_RULES, NEVER, TOO_FEW_OPERANDS, WITH_BYTES
from hloflops.cost.shapes import producer_tokens
from hloflops.graph import call_graph, call_table, module_bottom_up, module_bytes_unobserved
from hloflops.module_facts import ModuleInfo, has_unbounded, has_unbounded_shapes, module_info  # noqa: F401
from hloflops.xla import diagnostics as xla_diagnostics
from hloflops.xla.float32 import add, f32, mul, running_sum
from hloflops.xla.order import visit_positions
from hloparse.ir import CallRole, Computation, Instruction, Module

if TYPE_CHECKING:  # the graph property builds it; the pass does not need networkx (start-up)
    import networkx as nx

VIEWS = ("exact", "xla")
# XLA's four totals, in this order in every tuple below.
FLOPS, TRANSCENDENTALS, BYTES, OPTIMAL_SECONDS = range(4)
XLA_KEYS = ("flops", "transcendentals", "bytes accessed", "optimal_seconds")
F32_EXACT = 2**24  # integers up to this are exact in float32: their sum does not depend on order


def branch_max(values: list) -> Any:
    """XLA's per-key maximum over conditional branches: branch 0's value, raised by any later
    branch whose value is non-zero (XLA's Properties::ForEach skips zeros, so a lone -1 from a
    custom-call in branch 0 survives a branch that costs nothing)."""
    result = values[0]
    for v in values[1:]:
        if v != 0:
            result = max(result, v)
    return result


def round_bytes(terms: tuple) -> int:
    total = sum(terms)
    return total if type(total) is int else int(Fraction(total).limit_denominator(1))


class Evaluation:
    """Every instruction of a module costed once (see the module docstring)."""

    def __init__(self, module: Module, *, diagnostics: bool = False, view: str = "exact",
                 base: Evaluation | None = None) -> None:
        """`base`: the module's evaluation in view "exact" (without diagnostics); view "xla" then
        takes from it every computation that costs the same in both views (`_from_base`)."""
        if view not in VIEWS:
            raise ValueError(f"view must be one of {VIEWS}, not {view!r}")
        self.module = module
        self.view = view
        self.diagnostics = diagnostics
        reuse = (base is not None and view == "xla" and not diagnostics and base.module is module
                 and base.view == "exact" and not base.diagnostics and not base.unbounded)
        order = base.order if reuse else [name for name in module_bottom_up(module) if name in module.by_name]
        self.order = order  # callees first
        self.info = module_info(module, order, silenced=view != "exact")
        # Computations whose XLA bytes nobody reads (the diagnostic keys are read everywhere).
        self.unobserved = base.unobserved if reuse else set() if diagnostics else module_bytes_unobserved(
            module, order)
        self.exact: dict[str, list[OpCost]] = {}  # the costs of `view`, per instruction
        self.applied: dict[str, Cost | str] = {}  # one run as an APPLIED body, or why not
        self.xla: dict[str, tuple] = {}  # XLA's totals of one nested analysis of a computation
        self.xla_keys: dict[str, dict[str, Any]] = {}  # with diagnostics: every other key
        self.unavailable: dict[str, str] = {}  # why XLA's totals of a computation are unknowable
        self._callee_total = self.applied.get
        self._same_charge: dict[tuple, tuple] = {}
        self._local: dict[tuple, dict[tuple, tuple]] = {}
        self._plans = {unread: _memo_plans(unread) for unread in (False, True)}  # per bytes_unread
        # Computations of one structure (hloflops.cost.classes) in one context cost the same: the
        # first of a class is costed, the others get its results where it has results to share
        # (nothing uncounted, XLA's totals known: no reason that names one of its instructions).
        # (Not where `base` gives most computations: the keys would cost more than they save.)
        self._class = {} if diagnostics or reuse else self._classes(order)  # ENTRY has none
        self._costed: dict[int, str] = {}  # class -> the computation whose results it shares
        self._unshared: set[int] = set()  # classes whose first computation has none to share
        # Computations of one class hold the same shape objects: one of each class is looked at.
        firsts = {cls: name for name, cls in reversed(self._class.items())}
        looked_at = set(firsts.values()) | (module.by_name.keys() - self._class.keys())
        self.unbounded = view == "exact" and has_unbounded_shapes(
            comp for comp in module.computations if comp.name in looked_at)
        # Does some instruction cost differently in the two views (a charge with an exact view of
        # its own: custom-calls, kernels, kCustom gather/scatter fusions; or an unbounded shape)?
        # If not, every total of view "xla" in integers is that of this view (hloflops.xla.residual).
        self.views_differ = self.unbounded
        # Per computation, the instructions (by id) whose charge has an exact view of its own.
        self.differing: dict[str, set[int]] = {}
        exact, applied, xla = self.exact, self.applied, self.xla
        first_of, class_of = self._costed.get, self._class.get
        same: set[str] = set()  # computations whose APPLIED totals are those of `base`
        calls = call_table(module).calls
        for name in order:
            if reuse and name not in self.info.silenced and all(
                    callee in same for callee, _ in calls.get(name, ())):
                if self._from_base(module.by_name[name], base):  # type: ignore[arg-type]
                    same.add(name)
                continue
            first = first_of(class_of(name))  # type: ignore[arg-type]
            if first is None:
                self._computation(module.by_name[name])
            else:  # the results of the first computation of its class
                exact[name] = list(exact[first])
                applied[name] = applied[first]
                if first in xla:
                    xla[name] = xla[first]
                if first in self.differing:  # the same positions, in this computation's instructions
                    ids = self.differing[first]
                    self.differing[name] = {id(mine) for mine, theirs in zip(module.by_name[name].instructions,
                                                                             module.by_name[first].instructions)
                                            if id(theirs) in ids}

    def _from_base(self, comp: Computation, base: Evaluation) -> bool:
        """View "xla" of a computation that is not silenced and whose callees' APPLIED totals are
        `base`'s: an instruction's charge then is the same in both views (its rule sees the same
        instruction, callee totals and context), and its cost too unless the charge has an exact
        view of its own (base.differing): only those are costed again. Returns whether the
        computation's APPLIED total is base's (its callers may then come from base as well)."""
        name = comp.name
        costs = list(base.exact[name])
        differing = base.differing.get(name)
        if name in base.unavailable:
            self.unavailable[name] = base.unavailable[name]
        if not differing:
            self.exact[name] = costs
            self.applied[name] = base.applied[name]
            return True
        in_fusion, _, unobserved = self._context(comp)
        position = dict(zip(map(id, comp.instructions), range(len(costs))))
        flops = transcendentals = 0  # what the instructions costed again add to the APPLIED total
        counted = True
        for i in sorted(map(position.__getitem__, differing)):
            inst, old = comp.instructions[i], costs[i]
            new = costs[i] = self._charged(comp, inst, RULES[inst.opcode], in_fusion, unobserved,
                                           in_fusion and unobserved)[0]
            counted = counted and new.uncounted is None and old.uncounted is None
            flops += new.cost.flops - old.cost.flops
            transcendentals += new.cost.transcendentals - old.cost.transcendentals
        self.exact[name] = costs
        total = base.applied[name]
        if counted and isinstance(total, Cost):  # the same sums, with those instructions' new values
            self.applied[name] = Cost(total.flops + flops, total.transcendentals + transcendentals, 0)
        else:
            self.applied[name] = self._applied_of(comp, costs)
        return self.applied[name] == total

    def _applied_of(self, comp: Computation, costs: list[OpCost]) -> Cost | str:
        """A computation's total as an APPLIED body from its instructions' costs (as
        `_cost_computation` adds them up)."""
        flops = transcendentals = 0
        for inst, cost in zip(comp.instructions, costs):
            if cost.uncounted is not None:
                return f"{inst.name}: {cost.uncounted}"
            flops += cost.cost.flops
            transcendentals += cost.cost.transcendentals
            if inst.calls:
                inside = self._control_callees_total(inst)
                if isinstance(inside, str):
                    return inside
                flops += inside[0]
                transcendentals += inside[1]
        return Cost(flops, transcendentals, 0)

    @property
    def graph(self) -> nx.MultiDiGraph:
        """The module's networkx call graph (the pass itself walks hloflops.graph.call_table)."""
        return call_graph(self.module)

    def _context(self, comp: Computation) -> tuple[bool, bool, bool]:
        """(inside a fusion, silenced, bytes unobserved): what a computation's costs depend on
        besides its instructions."""
        name = comp.name
        in_fusion = comp.is_fusion_body or name in self.info.fusion_bodies
        return in_fusion, self.view != "exact" and name in self.info.silenced, name in self.unobserved

    def _classes(self, order: list[str]) -> dict[str, int]:
        """The class of each computation that may share one: one number per distinct (context,
        structure), callees (earlier in `order`) by their class. ENTRY, and a computation whose
        number of instructions no other has, cannot share: they get none (the key of a large
        one costs a good part of costing it)."""
        by_name = self.module.by_name
        sizes = Counter(len(by_name[name].instructions) for name in order)
        classes: dict[str, int] = {}
        numbers: dict[tuple, int] = {}
        for name in order:
            comp = by_name[name]
            if comp.is_entry or sizes[len(comp.instructions)] < 2:
                continue
            key = (self._context(comp), structure_key(comp, classes))
            classes[name] = numbers.setdefault(key, len(numbers))
        return classes

    # ---- one computation ---------------------------------------------------------------
    def _computation(self, comp: Computation) -> None:
        """Cost a computation; the first of its class shares its results with the others, if it
        has results to share."""
        name = comp.name
        cls = self._class.get(name)
        self._cost_computation(comp, *self._context(comp))
        if cls is None or cls in self._unshared:
            return
        if (name in self.unavailable or isinstance(self.applied[name], str)
                or any(cost.uncounted is not None for cost in self.exact[name])):
            self._unshared.add(cls)
        else:
            self._costed[cls] = name

    def _cost_computation(self, comp: Computation, in_fusion: bool, silenced: bool, unobserved: bool) -> None:
        estimate = self.view == "exact"  # XLA's float32 view is read from the exact evaluation only
        bytes_unread = in_fusion and unobserved  # no view reads the bytes: the rules skip them
        costs: list[OpCost] = []
        props: list[tuple] = []
        keys: list[dict[str, Any]] = []
        applied_flops = applied_transcendentals = 0
        applied_failed: str | None = None
        # Most instructions' rules read only the opcode, the shape, the operands' shapes and sizes
        # and maybe an attribute or the callees: each distinct combination is costed once per
        # context (LOCAL_RULES).
        local = None if silenced or self.unbounded or self.diagnostics else self._local.setdefault(
            (in_fusion, unobserved), {})
        plans = self._plans[bytes_unread] if local is not None else {}
        token = producer_tokens(comp).__getitem__ if local is not None else None
        for inst in comp.instructions:
            op = inst.opcode
            plan = plans.get(op)
            key: tuple | None = None
            if plan is not None:
                rule, least, by_operands, attributes, by_callees = plan  # one unpacking: 30k instructions
                operands = inst.operands
                count = len(operands)
                if count >= least:
                    if by_operands:  # most have one or two operands: a tuple made at once, no list, no map
                        if count == 2:
                            key = (op, id(inst.shape), token(operands[0]), token(operands[1]))  # type: ignore[misc]
                        elif count == 1:
                            key = (op, id(inst.shape), token(operands[0]))  # type: ignore[misc]
                        else:
                            key = (op, id(inst.shape), *map(token, operands))  # type: ignore[arg-type]
                    else:
                        key = (op, id(inst.shape))
                    if attributes:
                        key += tuple(map(inst.attributes.get, attributes))
                    if by_callees:
                        key = self._with_callees(key, inst)
            if key is not None:
                known = local.get(key)  # type: ignore[union-attr]
                if known is None:  # (cost, what it adds to XLA's sums, its flops, its transcendentals)
                    cost, prop, charge = self._charged(comp, inst, rule, in_fusion, unobserved, bytes_unread)
                    known = (cost, prop, cost.cost.flops, cost.cost.transcendentals)
                    # A charge with an exact view of its own is not kept: `differing` must list
                    # every instruction that has one (_from_base).
                    if charge.exact is None and charge.exact_uncounted is None:
                        local[key] = known  # type: ignore[index]
                cost = known[0]
                if estimate:
                    props.append(known[1])
                if not inst.calls and applied_failed is None:  # counted (never uncounted), no callee
                    costs.append(cost)
                    applied_flops += known[2]
                    applied_transcendentals += known[3]
                    continue
            elif silenced:  # XLA never looks inside (module docstring of hloflops.cost.rules)
                costs.append(OpCost(ZERO))
                continue
            elif (fn := RULES.get(op)) is None:
                cost = OpCost(uncounted=f"unknown opcode {op!r}")
                self._unavailable(comp, f"no rule for opcode {op!r} ({inst.name}, line {inst.line})")
            elif len(inst.operands) < OPERANDS[op]:
                cost = OpCost(uncounted=f"{op}: {TOO_FEW_OPERANDS}")
                self._unavailable(comp, f"{inst.name!r} (line {inst.line}): {op}: {TOO_FEW_OPERANDS}")
            else:
                cost, prop, charge = self._charged(comp, inst, fn, in_fusion, unobserved, bytes_unread)
                if estimate:
                    props.append(prop)
                if self.diagnostics:
                    keys.append(self._diagnostic_keys(comp, inst, charge))
            costs.append(cost)
            if applied_failed is None:
                if cost.uncounted is not None:
                    applied_failed = f"{inst.name}: {cost.uncounted}"
                    continue
                applied_flops += cost.cost.flops
                applied_transcendentals += cost.cost.transcendentals
                if inst.calls:
                    inside = self._control_callees_total(inst)
                    if isinstance(inside, str):
                        applied_failed = inside
                    else:
                        applied_flops += inside[0]
                        applied_transcendentals += inside[1]
        self.exact[comp.name] = costs
        self.applied[comp.name] = applied_failed if applied_failed is not None else Cost(
            applied_flops, applied_transcendentals, 0)
        if estimate and comp.name not in self.unavailable:
            self._xla_sum(comp, props, keys)

    def _with_callees(self, key: tuple, inst: Instruction) -> tuple | None:
        """The memo key with the callees' classes, or None when a callee has no results to share
        (a reason from it must reach this computation, naming its instructions)."""
        classes = tuple(map(self._class.get, map(_CALLEE, inst.calls)))
        if not all(map(self._costed.__contains__, classes)):
            return None
        return key + classes

    def _charged(self, comp: Computation, inst: Instruction, fn: Any, in_fusion: bool, unobserved: bool,
                 bytes_unread: bool) -> tuple[OpCost, tuple | None, Charge]:
        """One instruction's exact cost, what it adds to XLA's sums (None in view "xla") and its
        charge."""
        charge = fn(Ctx(self.module, comp, inst, self._callee_total, bytes_unread))
        if charge.exact is not None or charge.exact_uncounted is not None:
            self.views_differ = True
            self.differing.setdefault(comp.name, set()).add(id(inst))
        estimate = self.view == "exact"
        if charge.applied or charge.nested is not None or self.unbounded:
            return (self._own(comp, inst, charge, in_fusion),
                    self._xla_props(comp, inst, charge, unobserved) if estimate else None, charge)
        # Both views are a function of the charge alone: each distinct one once.
        key = (charge.flops, charge.transcendentals, charge.bytes_terms, charge.optimal_seconds,
               charge.exact, charge.exact_uncounted, in_fusion, unobserved)
        known = self._same_charge.get(key)
        if known is None:
            known = self._same_charge[key] = (
                self._own(comp, inst, charge, in_fusion),
                self._xla_props(comp, inst, charge, unobserved) if estimate else None)
        return known[0], known[1], charge

    def _own(self, comp: Computation, inst: Instruction, charge: Charge, in_fusion: bool) -> OpCost:
        if self.view == "exact":
            if self.unbounded and has_unbounded(comp, inst):
                return OpCost(uncounted=f"{inst.opcode}: unbounded dynamic dimension (size unknown)")
            if charge.exact_uncounted is not None:
                return OpCost(uncounted=charge.exact_uncounted)
            if charge.exact is not None:
                exact = charge.exact
                return OpCost(Cost(exact.flops, exact.transcendentals, 0 if in_fusion else exact.bytes_accessed))
        flops, transcendentals = charge.flops, charge.transcendentals
        for applied in charge.applied:
            body = self.applied[applied.computation]
            if isinstance(body, str):
                return OpCost(uncounted=body)
            flops += body.flops * applied.count
            transcendentals += body.transcendentals * applied.count
        return OpCost(Cost(flops, transcendentals, 0 if in_fusion else round_bytes(charge.bytes_terms)))

    def _control_callees_total(self, inst: Instruction) -> tuple[int, int] | str:
        """Flops and transcendentals of the CONTROL callees of one run of `inst` (a
        conditional's branches by their per-key maximum), or why not known."""
        flops = transcendentals = 0
        branches: list[Cost] = []
        for site in inst.calls:
            if site.role not in CallRole.CONTROL:
                continue
            sub = self.applied[site.computation]
            if isinstance(sub, str):
                return sub
            if site.role == CallRole.BRANCH:
                branches.append(sub)
            else:
                flops += sub.flops
                transcendentals += sub.transcendentals
        if branches:
            flops += branch_max([b.flops for b in branches])
            transcendentals += branch_max([b.transcendentals for b in branches])
        return flops, transcendentals

    # ---- XLA's view ----------------------------------------------------------------------
    def _unavailable(self, comp: Computation, reason: str) -> None:
        self.unavailable.setdefault(comp.name, reason)

    def _callee(self, comp: Computation, name: str) -> tuple:
        """XLA's totals of a callee (all zeros, and `comp` marked, when they are unknowable)."""
        reason = self.unavailable.get(name)
        if reason is not None:
            self._unavailable(comp, reason)
            return (0, 0, 0, 0)
        return self.xla[name]

    def _xla_props(self, comp: Computation, inst: Instruction, charge: Charge, unobserved: bool) -> tuple:
        """What this instruction adds to its computation's float32 sums, as XLA computes it
        (bytes and optimal seconds 0 where no caller reads them)."""
        nested = charge.nested
        if nested is None:
            flops, transcendentals = f32(charge.flops), f32(charge.transcendentals)
            for applied in charge.applied:
                body = self._callee(comp, applied.computation)
                count = f32(applied.count)
                flops = add(flops, mul(body[FLOPS], count))
                transcendentals = add(transcendentals, mul(body[TRANSCENDENTALS], count))
            if unobserved:
                return flops, transcendentals, 0, 0
            return flops, transcendentals, _f32_sum(charge.bytes_terms), f32(charge.optimal_seconds)
        if nested == NESTED_WHILE:
            body = self._callee(comp, inst.called(CallRole.WHILE_BODY)[0])
            cond = self._callee(comp, inst.called(CallRole.WHILE_CONDITION)[0])
            return tuple(add(b, c) for b, c in zip(body, cond))
        if nested == NESTED_CONDITIONAL:
            branches = [self._callee(comp, name) for name in inst.called(CallRole.BRANCH)]
            return tuple(branch_max([b[k] for b in branches]) for k in range(4))
        callee = self._callee(comp, next(s.computation for s in inst.calls if s.role in CallRole.CONTROL))
        if nested == NESTED_FUSION:  # the callee's flops, the bytes at the boundary
            if unobserved:
                return callee[FLOPS], callee[TRANSCENDENTALS], 0, 0
            return callee[FLOPS], callee[TRANSCENDENTALS], _f32_sum(charge.bytes_terms), 0
        if nested == NESTED_ASYNC:
            return callee[FLOPS], callee[TRANSCENDENTALS], callee[BYTES], 0
        if nested == NESTED_CALL:
            return callee
        raise ValueError(f"unknown nesting {nested!r}")

    def _diagnostic_keys(self, comp: Computation, inst: Instruction, charge: Charge) -> dict[str, Any]:
        nested = charge.nested
        if nested is None:
            return {k: f32(v) for k, v in xla_diagnostics.own_keys(charge, comp, inst).items()}
        if nested == NESTED_WHILE:
            body = self.xla_keys.get(inst.called(CallRole.WHILE_BODY)[0], {})
            cond = self.xla_keys.get(inst.called(CallRole.WHILE_CONDITION)[0], {})
            return {k: add(body.get(k, 0), cond.get(k, 0)) for k in dict.fromkeys(list(body) + list(cond))}
        if nested == NESTED_CONDITIONAL:
            branches = [self.xla_keys.get(name, {}) for name in inst.called(CallRole.BRANCH)]
            keys = dict(branches[0])
            for other in branches[1:]:
                for k, v in other.items():
                    if v != 0:  # XLA's Properties::ForEach skips zero values
                        keys[k] = max(keys.get(k, 0), v)
            return keys
        callee = next(s.computation for s in inst.calls if s.role in CallRole.CONTROL)
        keys = dict(self.xla_keys.get(callee, {}))
        if nested == NESTED_FUSION:
            body = self.module.by_name[callee]
            keys.update({k: f32(v) for k, v in xla_diagnostics.fusion_keys(self.module, inst, body).items()})
        return keys

    def _xla_sum(self, comp: Computation, props: list[tuple], keys: list[dict[str, Any]]) -> None:
        """A computation's totals: one float32 running sum per key, in XLA's visit order."""
        totals = []
        order: Sequence[int] | None = None
        for values in zip(*props) if props else ((), (), (), ()):
            total = sum(values)
            if type(total) is int and sum(map(abs, values)) <= F32_EXACT:
                totals.append(total)  # every partial sum is exact: the order does not matter
                continue
            if order is None:
                order = visit_positions(comp, None if self.diagnostics else lambda: _adds_to_sums(comp, props))
            totals.append(running_sum(values if order == range(len(values)) else list(map(values.__getitem__, order))))
        self.xla[comp.name] = tuple(totals)
        if self.diagnostics:
            sums: dict[str, Any] = {}
            for i in order if order is not None else visit_positions(comp):
                for k, v in keys[i].items():
                    sums[k] = add(sums.get(k, 0), v)
            self.xla_keys[comp.name] = sums

    def xla_total(self, comp: Computation) -> dict[str, Any]:
        """XLA's totals of `comp` (raises ValueError with the reason when unknowable)."""
        reason = self.unavailable.get(comp.name)
        if reason is not None:
            raise ValueError(reason)
        totals = dict(zip(XLA_KEYS, self.xla[comp.name]))
        if self.diagnostics:
            totals.update(self.xla_keys[comp.name])
        return totals


class _Plan(NamedTuple):
    """How the memo of costs keys one opcode's instructions (see LOCAL_RULES)."""

    rule: Any
    least: int  # operands: an instruction with fewer is malformed, and costed on its own
    operands: bool  # the key holds the operands (no: the rule reads none here)
    attributes: tuple[str, ...]
    callees: bool


def _memo_plans(bytes_unread: bool) -> dict[str, tuple]:
    """The plan of each opcode whose rule is in LOCAL_RULES, where bytes are read or not (a
    _Plan's fields, in its order)."""
    plans = {}
    for op, fn in RULES.items():
        reads = LOCAL_RULES.get(fn)
        if reads is not None:
            operands = not (reads.operands == NEVER or (bytes_unread and reads.operands == WITH_BYTES))
            # as a plain tuple: the engine's loop unpacks one per instruction, a tuple subclass more slowly
            plans[op] = tuple(_Plan(fn, OPERANDS[op], operands, reads.attributes, reads.callees))
    return plans


def _adds_to_sums(comp: Computation, props: list[tuple]) -> list[bool]:
    """Per instruction: has it operands, or does it add something to a sum? (The float32 running
    sums do not depend on where a zero is added; XLA's order then matters for the others only.)"""
    return list(map(or_, map(bool, map(_OPERANDS, comp.instructions)), map(_NOTHING.__ne__, props)))


_NOTHING = (0, 0, 0, 0)
_CALLEE = attrgetter("computation")
_OPERANDS = attrgetter("operands")


def _f32_sum(terms: tuple) -> Any:
    """XLA's float running sum of the terms, each rounded to float32 first."""
    exact = 0
    for term in terms:
        if type(term) is not int or term < 0:
            break
        exact += term
    else:
        if exact <= F32_EXACT:  # every partial sum is a float32: nothing rounds
            return exact
    total = 0
    for term in terms:
        total = add(total, f32(term))
    return total


_CACHE: "weakref.WeakKeyDictionary[Module, dict[tuple[str, bool], Evaluation]]" = weakref.WeakKeyDictionary()


def evaluate(module: Module, *, view: str = "exact", diagnostics: bool = False) -> Evaluation:
    """The module's evaluation (kept while the module lives: the module is immutable)."""
    per_module = _CACHE.setdefault(module, {})
    key = (view, diagnostics)
    if key not in per_module:
        # View "xla" without diagnostics takes what costs the same in both views from view "exact"
        # (the residual's causes ask for both: most of the second pass is not done again).
        base = per_module.get(("exact", False)) if key == ("xla", False) else None
        per_module[key] = Evaluation(module, view=view, diagnostics=diagnostics, base=base)
    return per_module[key]


def own_cost(module: Module, computation: Computation, instruction: Instruction, *, view: str = "exact") -> OpCost:
    """What one execution of `instruction` costs on its own (see hloflops.cost.rules)."""
    costs = evaluate(module, view=view).exact[computation.name]
    for inst, cost in zip(computation.instructions, costs):
        if inst is instruction:
            return cost
    raise KeyError(f"{instruction.name} is not an instruction of {computation.name}")


def applied_total(module: Module, name: str, view: str = "exact") -> Cost | str:
    """Flops and transcendentals of one execution of a computation as an APPLIED body (bytes
    are never charged inside it), or why it cannot be costed."""
    return evaluate(module, view=view).applied[name]
