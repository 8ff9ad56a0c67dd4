"""Loop- and remat-aware accounting: every instruction's cost times its executions.

    acc = account(module)                                   # trip counts found in the HLO
    acc = account(module, trip_counts={"while.3": 12})      # a while instruction by name
    acc = account(module, trip_counts={"*/while": 12})      # fnmatch pattern on the op_name

`trip_counts` keys are either a while instruction's name (always used, even over a count
found in the HLO) or a pattern matched against the while's `op_name` with fnmatch (`*`, `?`,
`[...]`); a pattern only fills in a count the analysis could not find. See hloflops.loops.tripcount.

Totals:
- Each instruction: `rules.own_cost(..., view="exact")` times the executions of its
  computation (hloflops.loops.execution). Exact Python ints.
- A loop with an unknown trip count counts its body at the certain lower bound (0 unless the
  evaluation proved more) and its condition once more than that; its rows are marked
  `executions_known=False` and the loop is listed with `trip_count=None`: the total is then
  a lower bound, never a silent guess.
- Conditionals whose selector is a constant or a function of the enclosing loops' counters
  (hloflops.loops.branches) count each branch for the executions that take it, exactly. The
  others (the program decides at run time) follow XLA: the total takes the branch with the most
  flops (ties: more transcendentals, more bytes, lower branch index); the other branches' rows
  are listed with 0 executions. `conditionals` reports every branch's cost, `total_lower_bound`
  takes their cheapest branch per metric instead and `bounds` gives the range of each metric
  (analysis.branch_totals).
- remat: rows the remat analysis calls real recomputation (hloflops.remat), all of a row's FLOPs
  but for a row only a share of which runs because of remat (`Row.remat_part`, `Row.remat_flops`);
  model FLOPs are `total.flops - remat_flops`.

Reconciliation with XLA (`xla_estimate`, which counts every loop body and condition once):
for a while `w` in computation C, executed m times, with trip count n, body B and
condition K, let S(c) be the cost of one execution of c with every loop inside it counted
once (XLA's way). Then

    extra(w) = m * ((n - 1) * S(B) + n * S(K))

and, summing outermost loops first, the extras add up exactly to the difference between our
total and the same total with every loop counted once (each level's extra is taken with the
loops inside it still at one iteration; theirs is their own). `reconciliation[w] =
extra(w).flops`; `reconciliation["residual"]` is everything else: what the exact view counts
differently from XLA (custom-calls XLA counts as -1, ...) and XLA's float32 rounding. A
resolved conditional adds `reconciliation[conditional]`: what following the branches it takes
changes against its dearest branch on every execution (analysis.branch_totals). In a loop-free
module without custom-calls the residual is exactly XLA's float32 rounding error (sum of ints
minus XLA's float32 sum).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from itertools import chain, compress, filterfalse, repeat
from operator import attrgetter, eq
from typing import Callable, Iterable, Mapping

from hloflops import remat as remat_analysis
from hloflops.cost.communication import SENDERS, SentBytes
from hloflops.cost.costs import ZERO, Cost, OpCost
from hloflops.cost.kernels import row_note
from hloflops.engine import evaluate, own_cost
from hloflops.graph import call_table
from hloflops.loops.formula import Formula, Totals, loop_formula
from hloflops.branch_totals import Anchored, anchored_by_computation, bounds, loop_totals, varying_loops
from hloflops.loops.branches import Resolution, resolve_conditionals
from hloflops.loops.execution import ExecutionCounts, execution_counts, is_executing_site
from hloflops.results import PHASES, Accounting, Extra, Loop, RematUnpaired, Row, RowBuilder, Uncounted
from hloflops.remat.hinges import remat_hinges
from hloflops.remat.stored_twin_copies import forward_round_trips, twin_store_rows, twin_stores
from hloflops.loops.tripcount import TripCount, trip_count
from hloflops.reconciliation import xla_misses
from hloparse.attribute_names import ALLOWED
from hloparse.ir import CallRole, Computation, Instruction, Module, SourceLocation

RESIDUAL = "residual"
CostFn = Callable[[Module, Computation, Instruction], OpCost]


@dataclass(frozen=True, slots=True)
class Branch:
    index: int
    computation: str
    cost: Cost  # one execution of the branch, everything inside it included


@dataclass(frozen=True, slots=True)
class Conditional:
    name: str
    computation: str
    executions: int
    branches: tuple[Branch, ...]
    chosen: int  # the branch the total counts where unresolved (most flops, XLA's convention)
    smallest: int  # the branch the lower bound counts where unresolved
    resolution: str = "data"  # "constant" | "per-trip" | "data" | "unresolved" (hloflops.loops.branches)
    branch_executions: tuple[int | None, ...] = ()  # per branch; None where the program decides
    note: str = ""  # how it was resolved, or why not
    waits_on: str | None = None  # a loop of unknown trip count whose counter the selector reads


@dataclass(frozen=True)
class LoopAccounting(Accounting):
    """`Accounting` plus what only loops and conditionals have."""

    conditionals: tuple[Conditional, ...] = ()
    total_lower_bound: Cost = ZERO  # cheapest branch of every unresolved conditional per metric, unknown loops at 0
    executions_known: bool = True  # False when some trip count is unknown
    formula: Formula | None = None  # the totals in the unknown trip counts (None: every count known)
    # metric -> (low, high): unresolved conditionals' cheapest / dearest branch per metric; high is
    # None where a trip count is unknown or an op uncounted (then nothing bounds it)
    bounds: Mapping[str, tuple[int, int | None]] = field(default_factory=dict)


def exact_cost(module: Module, computation: Computation, instruction: Instruction) -> OpCost:
    return own_cost(module, computation, instruction, view="exact")


def _calling_instructions(module: Module) -> dict[str, list[Instruction]]:
    """Each computation's instructions that call something (while, conditional, fusion, ...), in
    order: the folds below look at nothing else, and most computations call nothing."""
    return {name: [inst for inst in module.by_name[name].instructions if inst.calls]
            for name in call_table(module).calls}


def _rank(cost: Cost) -> tuple[int, int, int]:
    return cost.flops, cost.transcendentals, cost.bytes_accessed


class _Inclusive:
    """Inclusive costs of one execution of a computation, bottom-up over the call graph."""

    def __init__(self, module: Module, own: Mapping[str, Cost], trips: Mapping[str, TripCount], pick_max: bool,
                 callers: Mapping[str, list[Instruction]], anchored: Anchored | None = None,
                 rank: Callable[[Cost], tuple[int, ...]] | None = None):
        self.module = module
        # resolved conditionals by the computation one execution of which their counts describe
        self.anchored = anchored or {}
        self.rank = rank or _rank
        self.callers = callers  # each computation's instructions that call something
        self.own = own
        self.trips = trips
        self.pick_max = pick_max
        self.exact: dict[str, Cost] = {}  # loops at their trip counts
        self.once: dict[str, Cost] = {}  # every loop counted once (XLA's way)
        self.choice: dict[str, int] = {}  # conditional -> chosen branch index

    def compute(self, order: Iterable[str]) -> None:
        for name in reversed(list(order)):  # callees first
            self.exact[name], self.once[name] = self._one(name)

    def _one(self, name: str) -> tuple[Cost, Cost]:
        own = self.own.get(name, ZERO)
        exact, once = [own], [own]  # the terms of each sum, added up once at the end
        for inst in self.callers.get(name, ()):
            sites = [s for s in inst.calls if is_executing_site(inst, s.role) and s.computation in self.exact]
            if not sites:
                continue
            if inst.opcode == "while":
                tc = self.trips[inst.name]
                n = tc.value if tc.value is not None else tc.lower
                body = inst.called(CallRole.WHILE_BODY)[0]
                cond = inst.called(CallRole.WHILE_CONDITION)[0]
                exact += (self.exact[body].scaled(n), self.exact[cond].scaled(n + 1))
                once += (self.once[body], self.once[cond])
                continue
            branches = [s for s in sites if s.role == CallRole.BRANCH]
            if branches:
                pick = max if self.pick_max else min
                chosen = pick(branches, key=lambda s: (self.rank(self.exact[s.computation]), -s.index))
                self.choice[inst.name] = chosen.index
                exact.append(self.exact[chosen.computation])
                once.append(self.once[chosen.computation])
            for site in sites:
                if site.role != CallRole.BRANCH:
                    exact.append(self.exact[site.computation])
                    once.append(self.once[site.computation])
        for inst, resolution in self.anchored.get(name, ()):
            exact.append(self._taken_minus_chosen(inst, resolution))
        if len(exact) == 1:
            return own, own
        return _sum(exact), _sum(once)

    def _taken_minus_chosen(self, inst: Instruction, resolution: Resolution) -> Cost:
        """What the branches a resolved conditional takes cost, per execution of its anchor, minus
        its chosen branch counted on each of those executions (which the sum above holds)."""
        branch = {s.index: s.computation for s in inst.calls if s.role == CallRole.BRANCH}
        counts = resolution.counts or ()
        terms = [self.exact[branch[b]].scaled(n) for b, n in enumerate(counts) if n]
        terms.append(self.exact[branch[self.choice[inst.name]]].scaled(-sum(counts)))
        return _sum(terms)


def _sum(costs: list[Cost]) -> Cost:
    """The sum of Costs, in C (a Cost per addition was most of `_Inclusive` on an entry
    computation calling twenty thousand fusions; a Python loop, a tenth of the accounting)."""
    return Cost(sum(map(_FLOPS, costs)), sum(map(_TRANSCENDENTALS, costs)), sum(map(_BYTES, costs)))


def _sum_of_ops(costs: list[OpCost]) -> Cost:
    """`_sum` of the ops' costs, read by comprehensions: on an entry computation's tens of
    thousands of ops their specialised attribute loads beat `map` of an attrgetter (half the
    instructions per op), though not on `_Inclusive`'s short lists (a comprehension is a call)."""
    cs = [op.cost for op in costs]
    return Cost(sum([c.flops for c in cs]), sum([c.transcendentals for c in cs]), sum([c.bytes_accessed for c in cs]))


def account(module: Module, *, trip_counts: Mapping[str, int] | None = None,
            cost_fn: CostFn | None = None, xla: Mapping[str, float] | None = None) -> LoopAccounting:
    """The loop- and remat-aware accounting of a module (see the module docstring).
    `cost_fn` replaces `rules.own_cost(view="exact")` and `xla` replaces
    `xla_estimate(module)` (tests use both to check the bookkeeping on its own)."""
    if xla is None:
        from hloflops.xla.estimate import EstimateUnavailable, xla_estimate

        try:
            xla = xla_estimate(module)
        except EstimateUnavailable:
            # No XLA number to reconcile with (the ops behind it are listed as uncounted); the
            # exact count stands on its own and the whole of it shows as residual.
            xla = {}
    overrides = dict(trip_counts or {})
    first = execution_counts(module, overrides=overrides)
    trips = first.trip_counts
    callers = _calling_instructions(module)
    for name, insts in callers.items():  # loops no CONTROL path reaches are listed too
        for inst in insts:
            if inst.opcode == "while" and inst.name not in trips:
                trips[inst.name] = trip_count(module, module.by_name[name], inst, overrides)

    # Every instruction's exact cost, from the one pass over the module (hloflops.engine).
    exact = evaluate(module).exact if cost_fn is None else None
    op_costs: dict[str, list[OpCost]] = {}
    own: dict[str, Cost] = {}
    for name in first.order:
        comp = module.by_name[name]
        costs = exact[name] if exact is not None else [cost_fn(module, comp, inst) for inst in comp.instructions]
        op_costs[name] = costs
        own[name] = _sum_of_ops(costs)

    resolutions = resolve_conditionals(module, trips, first.order) if _has_conditional(callers) else {}
    anchored = anchored_by_computation(module, resolutions)

    def inclusive(pick_max: bool, rank: Callable[[Cost], tuple[int, ...]] | None = None,
                  resolved: bool = True) -> _Inclusive:
        inc = _Inclusive(module, own, trips, pick_max=pick_max, callers=callers,
                         anchored=anchored if resolved else None, rank=rank)
        inc.compute(first.order)
        return inc

    upper = inclusive(True)
    # Only branch choices tell the bounds apart: without conditionals the lower one is the same.
    lower = inclusive(False) if upper.choice else upper
    # The upper bound's branch choices decide the counts under unresolved multi-branch
    # conditionals, resolved ones split theirs; with none, the first counts (their trip counts
    # now hold every loop) are the same.
    taken = {name: r.counts for name, r in resolutions.items() if r.resolved and r.counts}
    ex = execution_counts(module, trips, branch_choice=upper.choice, taken=taken) if upper.choice else first

    op_names = remat_analysis.OpNames(module, ex.order)
    remat_index = remat_analysis.find_remat(module, [module.by_name[n] for n in ex.order], op_names)
    remat_bodies = remat_analysis.remat_fusion_bodies(module, remat_index)
    rows, uncounted = _rows(module, ex, op_costs, remat_index, remat_bodies, op_names)
    if remat_index.partial:
        rows = _partial_rows(rows, remat_index.partial, remat_bodies)
    if remat_index.twin_stores:
        remat_index = forward_round_trips(rows, remat_index)  # before the rows' flags are rewritten
        rows = twin_store_rows(rows, remat_index.twin_stores)
    loops = _loops(module, ex, upper, op_names, callers)
    formula = None
    if any(trips[w].value is None for w in ex.while_sites):  # hloflops.loops.formula
        constant = {name: r.counts.index(max(r.counts)) for name, r in resolutions.items()
                    if r.kind == "constant" and r.counts and sum(1 for c in r.counts if c) == 1}
        waiting = {name: r.waits_on for name, r in resolutions.items() if r.waits_on}

        def recount(counts: Mapping[str, int]) -> Totals:  # the accounting itself at those counts
            at = account(module, trip_counts={**overrides, **counts}, cost_fn=cost_fn, xla=xla).total
            return Totals(at.flops, at.transcendentals, at.bytes_accessed)

        formula = loop_formula(module, first.order, own, trips, upper.choice, callers,
                               settled=upper.exact, constant_branch=constant, anchored=anchored,
                               counter_conditionals=waiting, recount=recount)
    if taken:  # loops around a conditional resolved per trip: their totals follow the counts
        loops = varying_loops(loops, loop_totals(module, ex, own, resolutions))
    conditionals = _conditionals(module, ex, upper, lower, callers, resolutions) if upper.choice else []

    total = upper.exact[module.entry_name]
    xla_flops = xla.get("flops", 0.0)
    # XLA's float32 estimate overflows to inf for counts near int64 squared: nothing to reconcile to.
    xla_flops = int(xla_flops) if math.isfinite(xla_flops) else 0
    # What XLA's count misses, by loop and conditional (hloflops.reconciliation).
    misses, conditional_rows = xla_misses(module, ex, own, callers, loops, upper.choice, resolutions)
    loops = [replace(lp, extra_over_xla=misses[(lp.computation, lp.name)]) for lp in loops]
    reconciliation: dict[str, int] = {}
    for lp in loops:  # two loops sharing a name (hand-written modules) share an entry
        reconciliation[lp.name] = reconciliation.get(lp.name, 0) + lp.extra_over_xla.flops
    reconciliation.update(conditional_rows)
    reconciliation[RESIDUAL] = total.flops - xla_flops - sum(reconciliation.values())
    # Sums over the rows in C, as for the costs above (every row's phase is one of PHASES). The
    # columns are read by comprehensions (their attribute loads are specialised: faster than map
    # of an attrgetter), compared by operator.eq (a str.__eq__ method-wrapper builds a tuple per call).
    flops = [row.total.flops for row in rows]
    phases = [row.phase for row in rows]
    phase_flops = {p: sum(compress(flops, map(eq, phases, repeat(p)))) for p in PHASES}
    remat_flops = sum(compress(flops, [row.remat for row in rows]))
    if remat_index.partial or remat_index.twin_stores:  # rows of which only a share runs because of remat
        remat_flops -= sum(row.total.flops - row.remat_flops for row in rows if row.remat_part is not None)
    executions_known = all(tc.value is not None for w, tc in trips.items() if w in ex.while_sites)
    low, ranges = bounds(total, lower.exact[module.entry_name], resolutions, inclusive, module.entry_name,
                         bounded=executions_known and not uncounted)
    return LoopAccounting(
        module_name=module.name,
        rows=tuple(rows),
        loops=tuple(loops),
        uncounted=tuple(uncounted),
        total=total,
        remat_flops=remat_flops,
        phase_flops=phase_flops,
        xla_estimate=dict(xla),
        reconciliation=reconciliation,
        remat_unpaired=_unpaired(rows, remat_index),
        remat_hinges=remat_hinges(rows, remat_index),
        remat_twin_stores=twin_stores(rows, remat_index.twin_stores),
        conditionals=tuple(conditionals),
        formula=formula,
        total_lower_bound=low,
        executions_known=executions_known,
        bounds=ranges,
    )


def _has_conditional(callers: Mapping[str, list[Instruction]]) -> bool:
    return any(inst.opcode == "conditional" for insts in callers.values() for inst in insts)


def _rows(module: Module, ex: ExecutionCounts, op_costs: Mapping[str, list[OpCost]],
          remat_index: remat_analysis.RematIndex, remat_bodies: Mapping[str, bool],
          op_names: remat_analysis.OpNames):
    """One Row per instruction, and the uncounted ones. A large module has hundreds of
    thousands of rows (in tens of thousands of computations): they are made by one `map` of
    RowBuilder over columns that `map` and `chain` put together in C, without Python code per
    row but RowBuilder's, nor per computation (each was a large part of the time). What the few
    rows of custom-calls and collectives say besides their cost comes in a column of its own
    (`_extras_column`)."""
    order, by_name = ex.order, module.by_name
    comps = list(map(by_name.__getitem__, order))
    places = zip(order, map(ex.computations.get, order, repeat(0)), map(ex.known.get, order, repeat(True)),
                 map(ex.fusion_of.get, order), map(ex.loop_of.get, order),
                 map(_remat_names(module, remat_index, remat_bodies).get, order, repeat(frozenset())),
                 map(dict, repeat((), len(order))))  # a fresh `totals` dict each
    lengths = list(map(len, map(_INSTRUCTIONS, comps)))
    instructions = list(chain.from_iterable(map(_INSTRUCTIONS, comps)))
    costs = list(chain.from_iterable(map(op_costs.__getitem__, order)))
    rows: list[Row] = list(map(RowBuilder, chain.from_iterable(map(repeat, places, lengths)), instructions, costs,
                               _Described(module, op_names, order).column(),
                               _extras_column(module, comps, lengths, instructions, costs)))
    uncounted: list[Uncounted] = []
    if not _NONE.issuperset([cost.uncounted for cost in costs]):
        uncounted = [Uncounted(row.name, row.opcode, row.computation, row.uncounted,
                               by_name[row.computation].by_name[row.name].custom_call_target, row.executions)
                     for row in rows if row.uncounted is not None]
    return rows, uncounted


_INSTRUCTIONS = attrgetter("instructions")
_FLOPS, _TRANSCENDENTALS = attrgetter("flops"), attrgetter("transcendentals")
_BYTES = attrgetter("bytes_accessed")
_NONE = frozenset({None})
# Opcodes whose rows carry nothing but their cost: not a custom-call (a target, a note), not a
# collective (bytes sent), and not one XLA's parser lets carry a custom_call_target.
_PLAIN_OPCODES = frozenset(op for op, names in ALLOWED.items()
                           if op != "custom-call" and op not in SENDERS and "custom_call_target" not in names)


def _partial_rows(rows: list[Row], partial: Mapping[tuple[str, str], tuple[int, int]],
                  bodies: Mapping[str, bool]) -> list[Row]:
    """The rows with their remat share set where only part of an op's FLOPs is remat
    (`RematIndex.partial`), but in a remat clone's fused computation (all of it recomputes)."""
    return [replace(row, remat_part=share) if row.remat and not bodies.get(row.computation)
            and (share := partial.get((row.computation, row.name))) is not None else row for row in rows]


def _remat_names(module: Module, index: remat_analysis.RematIndex, bodies: Mapping[str, bool]) -> dict[str, set[str]]:
    """The instructions of each computation that are recomputation (all of a remat body's)."""
    by_computation: dict[str, set[str]] = {}
    for computation, name in index.remat:
        by_computation.setdefault(computation, set()).add(name)
    for computation, is_remat in bodies.items():
        if is_remat:
            by_computation[computation] = {inst.name for inst in module.by_name[computation].instructions}
    return by_computation


class _Extras:
    """What the row of a custom-call or collective says besides its cost: the target, the note
    and the bytes sent. Targets are decoded once per distinct text."""

    def __init__(self, module: Module):
        self.sent_bytes = SentBytes(module)
        self.targets: dict[str, str | None] = {}

    def of(self, comp: Computation, inst: Instruction, uncounted: str | None) -> Extra:
        raw = inst.attributes.get("custom_call_target")
        target = None
        if raw is not None:
            target = self.targets.get(raw)
            if target is None:
                target = self.targets[raw] = inst.custom_call_target
        note = row_note(comp, inst) if inst.opcode == "custom-call" and uncounted is None else None
        # A collective's bytes sent per device and execution (hloflops.cost.communication).
        sent = self.sent_bytes.of(comp, inst)
        return target, note, sent.bytes, sent.uncounted


def _extras_column(module: Module, comps: list[Computation], lengths: list[int], instructions: list[Instruction],
                   costs: list[OpCost]) -> list[Extra]:
    """What `_Extras` says for each row (instructions in order): the rows of plain opcodes, all
    but a few, share one tuple of defaults. Made before the rows, so that RowBuilder sets these
    fields once (setting them again on the few rows afterwards, and finding their instructions
    again, was a tenth of the rows)."""
    column = [_NO_EXTRA] * len(instructions)
    special = [k for k, inst in enumerate(instructions) if inst.opcode not in _PLAIN_OPCODES]
    if special:
        extras = _Extras(module)
        comp_of = list(chain.from_iterable(map(repeat, comps, lengths)))
        for k in special:
            column[k] = extras.of(comp_of[k], instructions[k], costs[k].uncounted)
    return column


_NO_EXTRA: Extra = (None, None, 0, None)


class _Described:
    """RowBuilder's `described` (phase, scope, source location) of each instruction, worked out
    once per metadata text (and name prefix): most instructions share theirs with others."""

    def __init__(self, module: Module, op_names: remat_analysis.OpNames, order: tuple[str, ...]):
        self.op_names = op_names
        self.order = order
        self.source_location = module.source_location
        for name in filterfalse(op_names.decoded.__contains__, order):  # every metadata text decoded
            op_names.metadata_in(module.by_name[name])
        self.by_prefix: dict[str, dict[str | None, tuple]] = {}  # name prefix -> metadata text -> described
        self.by_prefix[""] = {raw: self._described(op_name, op_names.first.get(raw))
                              for raw, op_name in op_names.by_metadata.items()}

    def _described(self, op_name: str, first: Instruction | None) -> tuple[str, str, SourceLocation | None]:
        source = self.source_location(first) if first is not None else None
        return remat_analysis.phase(op_name), remat_analysis.scope(op_name), source

    def column(self) -> Iterable[tuple]:
        """The described of each row (instructions of `order`, in order)."""
        op_names, prefix = self.op_names, self.op_names.prefix
        if not any(map(prefix.get, self.order)):  # whole names (optimized modules): one table
            return map(self.by_prefix[""].__getitem__, chain.from_iterable(map(op_names.raws.__getitem__, self.order)))
        return chain.from_iterable(map(self._of, self.order))

    def _of(self, name: str) -> Iterable[tuple]:
        op_names = self.op_names
        raws = op_names.raws[name]
        prefix = op_names.prefix.get(name)
        if not prefix:
            return map(self.by_prefix[""].__getitem__, raws)
        # Called functions of a module before optimization: their names continue the caller's.
        table = self.by_prefix.setdefault(prefix, {})
        for raw in set(raws).difference(table):
            table[raw] = self._described(op_names.join(prefix, op_names.by_metadata[raw]), op_names.first.get(raw))
        return map(table.__getitem__, raws)


def _unpaired(rows: list[Row], index: remat_analysis.RematIndex) -> tuple[RematUnpaired, ...]:
    merged = set(index.merged)
    if not merged:
        return ()
    return tuple(RematUnpaired(r.name, r.computation, r.opcode, r.total.flops)
                 for r in rows if (r.computation, r.name) in merged and not r.remat)


def _loops(module: Module, ex: ExecutionCounts, inc: _Inclusive,
           op_names: remat_analysis.OpNames | None, callers: Mapping[str, list[Instruction]]) -> list[Loop]:
    loops: list[Loop] = []
    for name in ex.order:
        for inst in callers.get(name, ()):
            if inst.opcode != "while" or inst.name not in ex.while_sites:
                continue
            tc = ex.trip_counts[inst.name]
            n = tc.value if tc.value is not None else tc.lower
            body = inst.called(CallRole.WHILE_BODY)[0]
            cond = inst.called(CallRole.WHILE_CONDITION)[0]
            m = ex.of(name)
            per_execution = inc.exact[body].scaled(n) + inc.exact[cond].scaled(n + 1)
            loops.append(Loop(
                name=inst.name,
                computation=name,
                body=body,
                condition=cond,
                trip_count=tc.value,
                source=tc.source,
                bounds=(tc.lower, tc.upper),
                executions=m,
                body_cost=inc.exact[body] + inc.exact[cond],
                total=per_execution.scaled(m),
                extra_over_xla=ZERO,  # filled in by hloflops.reconciliation once the totals are final
                parent=ex.loop_of.get(name),
                note=tc.note,
                **_loop_names(module, name, inst, op_names),
            ))
    return loops


def _loop_names(module: Module, computation: str, inst: Instruction,
                op_names: remat_analysis.OpNames | None) -> dict[str, str]:
    op_name = op_names.of(computation, inst) if op_names is not None else inst.op_name
    where = module.source_location(inst)
    return {"scope": op_name, "location": f"{where.file}:{where.line}" if where else "",
            "phase": remat_analysis.phase(op_name)}


def _conditionals(module: Module, ex: ExecutionCounts, upper: _Inclusive, lower: _Inclusive,
                  callers: Mapping[str, list[Instruction]], resolutions: Mapping[str, Resolution]) -> list[Conditional]:
    found: list[Conditional] = []
    for name in ex.order:
        for inst in callers.get(name, ()):
            if inst.name not in upper.choice:
                continue
            branches = tuple(
                Branch(s.index, s.computation, upper.exact[s.computation])
                for s in sorted(inst.calls, key=lambda s: s.index) if s.role == CallRole.BRANCH
            )
            resolution = resolutions.get(inst.name)
            runs = ex.of(name)
            if resolution is None:  # one branch: it runs whatever the selector says
                kind, executions, note = "constant", (runs,), "one branch"
            elif resolution.resolved and resolution.counts:
                kind, note = resolution.kind, resolution.note
                executions = tuple(runs * n // resolution.per_anchor if resolution.per_anchor else 0
                                   for n in resolution.counts)
            else:
                kind, executions, note = resolution.kind, (None,) * len(branches), resolution.note
            found.append(Conditional(inst.name, name, runs, branches, upper.choice[inst.name],
                                     lower.choice[inst.name], kind, executions, note,
                                     resolution.waits_on if resolution is not None else None))
    return found


# ---- views the product layer can use ---------------------------------------------------------


def remat_by_loop(acc: Accounting) -> dict[str | None, tuple[int, int]]:
    """Innermost enclosing loop (None: outside loops) -> (flops, remat_flops)."""
    result: dict[str | None, tuple[int, int]] = {}
    for row in acc.rows:
        flops, remat_flops = result.get(row.loop, (0, 0))
        result[row.loop] = (flops + row.total.flops, remat_flops + row.remat_flops)
    return result


def remat_by_scope(acc: Accounting, depth: int | None = None) -> dict[str, tuple[int, int]]:
    """Name scope (cut to `depth` components of the model path) -> (flops, remat_flops)."""
    result: dict[str, tuple[int, int]] = {}
    for row in acc.rows:
        key = remat_analysis.model_path(row.scope)
        if depth is not None:
            key = "/".join(key.split("/")[:depth])
        flops, remat_flops = result.get(key, (0, 0))
        result[key] = (flops + row.total.flops, remat_flops + row.remat_flops)
    return result
