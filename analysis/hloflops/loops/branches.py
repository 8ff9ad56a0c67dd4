"""Which branch a conditional takes, per trip of the loops around it.

A conditional's branch index (or predicate) is often a function of the enclosing loops'
counters and constants: `cond(i % 2 == 0, ...)`, warm-up steps (`i == 0`), schedules
(`i < warmup`), `switch(i % k, ...)`. The selector is traced into a scalar expression with the
loop evaluator (hloflops.loops.loop_eval: through tuples, get-tuple-element, copies, fusions and
calls), from the conditional's computation up to the innermost enclosing while body, where it
reads that loop's state. The state elements it reads are followed through the body's updates
and back to their initial values in the computation holding the while; when those read an
outer loop's state in turn, that loop is a level too (an inner predicate on an outer counter).
A single level of at least `CLOSED_FORM_FROM` trips whose elements are affine counters is first
counted in closed form (hloflops.loops.branch_closed_form: threshold and periodic selectors).
Otherwise the levels are enumerated jointly, trip by trip, with the element types' own
arithmetic, up to `EVALUATION_BUDGET` evaluations over the module (an inner level whose initial
values do not change between outer trips is evaluated once and reused). Small integer arrays are
followed too (a scan's backward reads the branch indices its forward stacked).

A resolution is per execution of its *anchor* computation: the one holding the outermost
while whose state the selector reads (the conditional's own computation for a constant
selector). Between the anchor and the conditional every computation must have one executing
call site and every loop a known trip count, and every other multi-branch conditional crossed
must be resolved: a constant one onto the crossed branch, or a per-trip one whose selector is
evaluated in the same enumeration (only the trips it sends down the crossed branch count). Then
one execution of the anchor runs the conditional exactly `sum(counts)` times, `counts[b]` of them
taking branch b.

Kinds:
    "constant"  the selector is a constant expression (no loop state, no data)
    "per-trip"  evaluated for every trip of the loops it reads
    "data"      the selector reads data (an ENTRY parameter, a tensor, a reduce): the program
                decides at run time, and the totals become a range
    "unresolved" it could be evaluated in principle, but is not (a trip count is unknown, the
                budget ran out, a shared computation or an unresolved conditional is in the way)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from hloflops.graph import call_table, is_executing_site
from hloflops.loops import loop_eval
from hloflops.loops.branch_closed_form import closed_form_counts
from hloflops.loops.loop_eval import Expr, Frame, Path, Tracer
from hloflops.loops.tripcount import TripCount
from hloparse.ir import CallRole, Computation, Instruction, Module

EVALUATION_BUDGET = 1_000_000  # selector evaluations and state steps, over all conditionals of a module
MAX_STATE_ELEMENTS = 16  # loop-state scalars one level follows at most
MAX_LEVELS = 8  # nested loops one selector may read through
RESOLVED = frozenset({"constant", "per-trip"})
# A single loop level at least this long is first tried in closed form (affine counters, periodic
# or threshold selectors); shorter ones, and whatever the closed form declines, are enumerated.
CLOSED_FORM_FROM = 4096
_EVAL_ERRORS = (loop_eval.EvaluationError, OverflowError, ValueError, ZeroDivisionError, TypeError)


@dataclass(frozen=True, slots=True)
class Resolution:
    kind: str  # "constant" | "per-trip" | "data" | "unresolved"
    anchor: str | None  # the computation one execution of which `counts` describes
    counts: tuple[int, ...] | None  # branch index -> executions per execution of the anchor
    note: str = ""
    # A loop of unknown trip count whose counter the selector reads: "unresolved" where no trip is
    # certain, else resolved for the trips the program proves (its lower bound); more may run.
    waits_on: str | None = None

    @property
    def resolved(self) -> bool:
        return self.kind in RESOLVED

    @property
    def per_anchor(self) -> int:
        """Executions of the conditional per execution of its anchor."""
        return sum(self.counts or ())


class _NeverRuns(Exception):
    """The conditional sits in a branch of a constant conditional that is never taken."""


class _Unresolved(Exception):
    """Why a selector cannot be resolved; `kind` is "data" or "unresolved"."""

    def __init__(self, kind: str, why: str, loop: str | None = None):
        super().__init__(why)
        self.kind = kind
        self.loop = loop  # the loop of unknown trip count that stopped it, if that was why


@dataclass(frozen=True, slots=True)
class _Hop:
    """One call from `caller` to `callee` on the way up from a conditional."""

    callee: str
    caller: str
    instruction: Instruction
    role: CallRole
    index: int


@dataclass(frozen=True)
class _Segment:
    """The calls from a computation up to its innermost enclosing while body (`loop` is that
    while, `top` its body), or up to a computation with no single executing caller."""

    hops: tuple[_Hop, ...]  # innermost first
    loop: Instruction | None
    loop_computation: str | None  # where `loop` lives


@dataclass(frozen=True)
class _Level:
    """One loop level of the joint enumeration, outermost first."""

    name: str
    trips: int
    init: tuple[tuple[Path, Callable], ...]  # element -> value from the enclosing level's state
    steps: tuple[tuple[Path, Callable], ...]  # elements the body changes -> their update
    updates: Mapping[Path, Expr]  # the updates as expressions (every element, unchanged ones too)
    init_exprs: Mapping[Path, Expr]
    gates: tuple[Callable, ...] = ()  # tests of a state: only trips passing all reach the conditional


def branch_count(inst: Instruction) -> int:
    return sum(1 for s in inst.calls if s.role == CallRole.BRANCH)


def branch_of(value: object, selector_type: str, branches: int) -> int:
    """The branch a selector value picks: a pred takes branch 0 when true; an index out of
    range takes the last branch (XLA's semantics)."""
    if selector_type == "pred":
        return 0 if value else 1
    index = int(value)  # type: ignore[call-overload]
    return index if 0 <= index < branches else branches - 1


class _Resolver:
    def __init__(self, module: Module, trips: Mapping[str, TripCount], order: tuple[str, ...],
                 budget: int = EVALUATION_BUDGET, closed_form_from: int = 0):
        self.closed_form_from = closed_form_from
        self.module = module
        self.trips = trips
        self.reachable = frozenset(order)
        self.tracer = Tracer(module, arrays=True)
        self.budget = budget
        self.sites: dict[str, list[_Hop]] = {}
        for caller, pairs in call_table(module).calls.items():
            if caller not in self.reachable:
                continue
            for callee, site in pairs:
                inst, role = site["instruction"], site["role"]
                if callee in self.reachable and is_executing_site(inst, role):
                    self.sites.setdefault(callee, []).append(_Hop(callee, caller, inst, role, site["index"]))
        self.resolutions: dict[str, Resolution] = {}

    # ---- the way up -------------------------------------------------------------------------
    def _segment(self, computation: str) -> _Segment:
        hops: list[_Hop] = []
        name = computation
        while True:
            sites = self.sites.get(name, [])
            if len(sites) != 1:
                return _Segment(tuple(hops), None, None)
            hop = sites[0]
            if hop.role == CallRole.WHILE_BODY:
                return _Segment(tuple(hops), hop.instruction, hop.caller)
            if hop.role == CallRole.WHILE_CONDITION:
                return _Segment(tuple(hops), None, None)
            hops.append(hop)
            name = hop.caller
            if len(hops) > loop_eval.MAX_DEPTH:
                return _Segment(tuple(hops), None, None)

    def _frame(self, computation: str, segment: _Segment) -> Frame:
        """Frames from the segment's top down to `computation`."""
        module = self.module
        if segment.loop is not None:
            top = module.by_name[segment.loop.called(CallRole.WHILE_BODY)[0]]
            frame = self.tracer.loop_frame(top)
        else:
            top_name = segment.hops[-1].caller if segment.hops else computation
            frame = self.tracer.outer_frame(module.by_name[top_name])
        for hop in reversed(segment.hops):
            callee = module.by_name[hop.callee]
            if hop.role == CallRole.BRANCH:
                frame = loop_eval.branch_frame(module, callee, hop.instruction, hop.index + 1, frame)
            else:
                frame = Frame(module, callee, caller=hop.instruction, parent=frame, depth=frame.depth + 1)
        return frame

    def _gates(self, segment: _Segment) -> list[tuple[Expr, Callable]]:
        """The conditionals crossed between the anchor and the conditional: each must be resolved.
        A constant one onto the crossed branch lets every trip through; a per-trip one lets through
        the trips its selector sends down the crossed branch: (its selector in the segment's loop
        state, a test of a state). Any other makes the conditional's trips data."""
        gates: list[tuple[Expr, Callable]] = []
        for k, hop in enumerate(segment.hops):
            if hop.role != CallRole.BRANCH or branch_count(hop.instruction) < 2:
                continue
            gate = self.resolutions.get(hop.instruction.name)
            if gate is not None and gate.kind == "constant" and gate.counts and not gate.counts[hop.index]:
                raise _NeverRuns(f"it never runs: branch {hop.index} of {hop.instruction.name} "
                                 "(a constant selector) is not taken")
            if gate is not None and gate.kind == "constant" and gate.counts:
                continue
            if gate is None or gate.kind != "per-trip" or segment.loop is None:
                raise _Unresolved("unresolved", f"it runs inside conditional {hop.instruction.name}, "
                                                "whose branch is decided at run time")
            above = _Segment(segment.hops[k + 1:], segment.loop, segment.loop_computation)
            caller = self.module.by_name[hop.caller]
            expr = self._trace(self._frame(hop.caller, above), hop.instruction.operands[0])
            gates.append((expr, _passes(loop_eval.compile_expr(expr), caller.by_name[hop.instruction.operands[0]]
                                        .shape.element_type, branch_count(hop.instruction), hop.index)))
        return gates

    def _trace(self, frame: Frame, name: str, path: Path = ()) -> Expr:
        expr = loop_eval.fold(self.tracer.trace(frame, name, path))
        reason = loop_eval.first_opaque(expr)
        if reason is not None:
            raise _Unresolved("data", f"it depends on {reason}")
        return expr

    # ---- one conditional -------------------------------------------------------------------
    def resolve(self, computation: Computation, inst: Instruction) -> Resolution:
        try:
            return self._resolve(computation, inst)
        except _Unresolved as why:
            return Resolution(why.kind, None, None, str(why), why.loop)
        except _NeverRuns as why:  # no execution to decide: every branch runs 0 times
            counts = (1,) + (0,) * (branch_count(inst) - 1)
            return Resolution("constant", computation.name, counts, str(why))
        except RecursionError:
            return Resolution("unresolved", None, None, "the selector's dependency chain is too deep to trace")

    def _resolve(self, computation: Computation, inst: Instruction) -> Resolution:
        branches = branch_count(inst)
        selector_type = computation.by_name[inst.operands[0]].shape.element_type
        segment = self._segment(computation.name)
        selector = self._trace(self._frame(computation.name, segment), inst.operands[0])
        if selector[0] == "const":
            counts = [0] * branches
            counts[branch_of(selector[1], selector_type, branches)] = 1
            return Resolution("constant", computation.name, tuple(counts), "the selector is a constant expression")
        gates = self._gates(segment)
        needed = loop_eval.variables(selector).union(*(loop_eval.variables(e) for e, _ in gates))
        levels, anchor = self._levels(segment, needed, [test for _, test in gates])
        value = loop_eval.compile_expr(selector)

        def pick(env: Mapping[Path, object]) -> int:
            return branch_of(value(env), selector_type, branches)

        waits = next((lv.name for lv in levels if self.trips[lv.name].value is None), None)
        loops = ", ".join(f"{lv.name} ({lv.trips:,} trips{' certain, the count unknown' if lv.name == waits else ''})"
                          for lv in levels)
        closed = self._closed_form(levels, selector, pick, branches)
        if closed is not None:
            return Resolution("per-trip", anchor, tuple(closed), f"counted in closed form over {loops}", waits)
        counts = self._enumerate(levels, pick, branches)
        return Resolution("per-trip", anchor, tuple(counts), f"evaluated for every trip of {loops}", waits)

    def _closed_form(self, levels: list[_Level], selector: Expr, pick: Callable, branches: int) -> list[int] | None:
        """One level of affine counters with a periodic or threshold selector, counted without
        stepping every trip (hloflops.loops.branch_closed_form); None where it does not apply."""
        if len(levels) != 1 or levels[0].trips < self.closed_form_from or levels[0].gates:
            return None
        level = levels[0]
        if any(e[0] != "const" for e in level.init_exprs.values()):
            return None
        initial = {p: e[1] for p, e in level.init_exprs.items()}
        dtypes = {p: e[2] for p, e in level.init_exprs.items()}
        found = closed_form_counts(selector, pick, branches, level.updates, initial, dtypes, level.trips, self.budget)
        if found is None:
            return None
        counts, spent = found
        self.budget -= spent
        return counts

    def _levels(self, segment: _Segment, needed: set[Path], gates: list[Callable]) -> tuple[list[_Level], str]:
        """The loop levels the selector reads, outermost first, and the anchor computation.
        `gates`: the tests of the innermost level's trips that reach the conditional."""
        levels: list[_Level] = []
        while True:
            loop = segment.loop
            if loop is None:  # vars only come from a loop frame: cannot happen, but never guess
                raise _Unresolved("unresolved", "the loop state it reads has no single enclosing loop")
            tc = self.trips.get(loop.name)
            if tc is None or (tc.value is None and not tc.lower):
                raise _Unresolved("unresolved", f"the trip count of {loop.name} is unknown", loop.name)
            # An unknown count the program proves at least `lower`: the totals count those trips,
            # so the branches they take are resolved (`waits_on` marks that more may run).
            trips = tc.value if tc.value is not None else tc.lower
            if len(levels) >= MAX_LEVELS:
                raise _Unresolved("unresolved", f"it reads more than {MAX_LEVELS} nested loops")
            body = self.module.by_name[loop.called(CallRole.WHILE_BODY)[0]]
            updates = self._updates(body, needed)
            outer = self._segment(segment.loop_computation)
            frame = self._frame(segment.loop_computation, outer)
            init = {path: self._trace(frame, loop.operands[0], path) for path in updates}
            steps = tuple((p, loop_eval.compile_expr(u)) for p, u in updates.items() if u != ("var", p))
            levels.append(_Level(loop.name, trips, tuple((p, loop_eval.compile_expr(e)) for p, e in init.items()),
                                 steps, updates, init, tuple(gates)))
            outer_needed = set().union(*(loop_eval.variables(e) for e in init.values()))
            if not outer_needed:
                levels.reverse()
                return levels, segment.loop_computation
            found = self._gates(outer)
            outer_needed = outer_needed.union(*(loop_eval.variables(e) for e, _ in found))
            gates = [test for _, test in found]
            segment, needed = outer, outer_needed

    def _updates(self, body: Computation, needed: set[Path]) -> dict[Path, Expr]:
        frame = self.tracer.loop_frame(body)
        updates: dict[Path, Expr] = {}
        pending = sorted(needed)
        while pending:
            path = pending.pop()
            if path in updates:
                continue
            if len(updates) >= MAX_STATE_ELEMENTS:
                raise _Unresolved("unresolved", f"it depends on more than {MAX_STATE_ELEMENTS} loop-state elements")
            updates[path] = self._trace(frame, body.root.name, path)
            pending.extend(sorted(loop_eval.variables(updates[path]) - updates.keys()))
        return updates

    # ---- the joint enumeration ---------------------------------------------------------------
    def _enumerate(self, levels: list[_Level], pick: Callable, branches: int) -> list[int]:
        memo: dict[tuple, list[int]] = {}

        def run(depth: int, outer: Mapping[Path, object]) -> list[int]:
            level = levels[depth]
            env = {path: value(outer) for path, value in level.init}
            key = (depth, tuple(sorted(env.items())))
            if key in memo:
                return memo[key]
            counts = [0] * branches
            last = depth == len(levels) - 1
            for _ in range(level.trips):
                if self.budget <= 0:
                    raise _Unresolved("unresolved", f"more than {EVALUATION_BUDGET:,} evaluations would be needed")
                self.budget -= 1 + len(level.steps) + len(level.gates)
                if level.gates and not all(test(env) for test in level.gates):
                    pass  # a conditional around it sends this trip elsewhere
                elif last:
                    counts[pick(env)] += 1
                else:
                    counts = [a + b for a, b in zip(counts, run(depth + 1, env))]
                if level.steps:
                    env = {**env, **{path: step(env) for path, step in level.steps}}
            memo[key] = counts
            return counts

        try:
            return run(0, {})
        except _EVAL_ERRORS as error:
            raise _Unresolved("unresolved", f"the evaluation stopped: {error}") from error


def _passes(value: Callable, selector_type: str, branches: int, index: int) -> Callable:
    return lambda env: branch_of(value(env), selector_type, branches) == index


def resolve_conditionals(module: Module, trips: Mapping[str, TripCount], order: tuple[str, ...],
                         budget: int = EVALUATION_BUDGET, closed_form_from: int = CLOSED_FORM_FROM,
                         ) -> dict[str, Resolution]:
    """Every reachable conditional with more than one branch -> its Resolution. `order` is the
    computations reachable from ENTRY, callers first (conditionals that gate others are resolved
    before them)."""
    resolver = _Resolver(module, trips, order, budget, closed_form_from)
    calls = call_table(module).calls
    found: list[tuple[str, Instruction]] = []
    for name in order:
        here = {site["instruction"].name: site["instruction"] for _, site in calls.get(name, ())
                if site["role"] == CallRole.BRANCH}
        found += [(name, inst) for inst in here.values() if branch_count(inst) > 1]
    # Results are keyed by instruction name (as XLA's names are unique in a module); a name two
    # conditionals share in a hand-written module is left unresolved rather than mixed up.
    names = [inst.name for _, inst in found]
    shared = {n for n in names if names.count(n) > 1} if len(set(names)) != len(names) else set()
    for name, inst in found:
        if inst.name in shared:
            resolver.resolutions[inst.name] = Resolution("unresolved", None, None,
                                                         "its name is shared by several conditionals")
        else:
            resolver.resolutions[inst.name] = resolver.resolve(module.by_name[name], inst)
    return resolver.resolutions
