"""Totals as polynomials in the trip counts the analysis could not find.

Each while loop whose trip count is unknown becomes a symbol named after its while instruction
(`N[while.3]`: the number of body executions of each execution of that while). One execution of
a computation costs its own instructions plus, for each call site, its callee's cost times the
callee's executions per call: 1 for a fusion, call or async op, the chosen branch of a
conditional (the same choice the accounting made), n and n + 1 for the body and the condition of
a loop of known trip count n, and N and N + 1 for a loop of unknown trip count. Folded bottom-up
over the same call graph `hloflops.accounting` folds with numbers, the ENTRY cost is a
polynomial in the symbols with Cost coefficients. A loop inside an unknown loop multiplies, so
every term is a product of distinct symbols (a while instruction cannot enclose itself): the
polynomial is multilinear (up to loops sharing a name, see `Monomial`), and its coefficients are
non-negative (sums of products of costs and trip counts), so it grows with every symbol and its
extremes lie at the symbols' bounds; the one exception is marked (`upper_bound`, below).

Substituting the accounting's own lower bounds (0, or what the evaluation proved) gives the
accounting's total; substituting given counts gives what `account(trip_counts=...)` gives for
them, as long as no conditional's choice of branch depends on a symbol. Where one does (a
branch holds an unknown loop), the polynomial keeps the branch the accounting chose at the
lower bounds, `Formula.notes` says so, and `Formula.evaluate` folds the call graph with numbers
at the given counts instead, choosing each conditional's branch as the accounting does.

Conditionals resolved per trip (hloflops.loops.branches) are counted as the accounting counts
them: each site adds its dearest branch, and the computation one execution of which the
resolution describes (its anchor) adds the branches taken less that branch on each of those
executions; an anchor inside an unknown loop is multiplied by its symbol like any cost there. A
conditional reading the counter of an unknown loop has no such per-execution count: where the
loop's proved lower bound L is 0 it keeps its dearest branch, else the accounting resolves it for
the L certain trips and the polynomial adds that at the anchor. Either way the polynomial counts
the dearest branch on every trip beyond those (a constant term may then be negative); it is an
upper bound (`upper_bound`, said in `notes`), and `evaluate` runs the accounting at the counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

from hloflops.cost.costs import ZERO, Cost
from hloflops.graph import is_executing_site
from hloflops.loops.tripcount import TripCount
from hloparse.ir import CallRole, Instruction, Module

# The symbols multiplied in one term, sorted, a name once per loop it counts: two while
# instructions may share a name in a hand-written module (`while` in ENTRY and `while` in its
# body), and a count given for the name is both loops' count, so their term is N[while] x N[while].
Monomial = tuple  # tuple[str, ...]; () is the constant
CostPolynomial = dict  # dict[Monomial, Cost]
METRICS = ("flops", "transcendentals", "bytes_accessed")
_ONE: Monomial = ()


@dataclass(frozen=True, slots=True)
class Totals:
    """The totals for given trip counts (`Report.evaluate`)."""

    flops: int
    transcendentals: int
    bytes_accessed: int

    def as_dict(self) -> dict[str, int]:
        return {"flops": self.flops, "transcendentals": self.transcendentals, "bytes_accessed": self.bytes_accessed}


@dataclass(frozen=True, slots=True)
class Symbol:
    """One unknown trip count: the while instruction it names and what the program proves of it."""

    name: str  # the while instruction
    lower: int  # certain lower bound on the body executions per execution of the while
    upper: int | None  # proved upper bound, None if there is none
    note: str = ""  # why the count is unknown


# One computation of the fold: (name, own cost, call sites), a call site being ("call", callee),
# ("while", body, condition, known trip count or None, symbol), ("branch", ((index, callee), ...),
# constant branch or None, conditional) or ("anchored", arms, counts, conditional, the branch its
# site counted): a conditional resolved per trip, counted at its anchor (hloflops.branch_totals).
Step = tuple
Recount = Callable[[Mapping[str, int]], "Totals"]


@dataclass(frozen=True)
class Formula:
    """The ENTRY totals as a polynomial in the unknown trip counts (see the module docstring)."""

    symbols: tuple[Symbol, ...]
    terms: tuple[tuple[Monomial, Cost], ...]  # non-zero terms, in `_term_order`
    notes: tuple[str, ...] = ()
    # The fold itself, callees first, kept where a conditional's branch holds an unknown loop:
    # which branch is dearest then depends on the counts, and `evaluate` chooses it as the
    # accounting does (most flops, then transcendentals, bytes, lower index).
    plan: tuple[Step, ...] = ()
    # The accounting itself at given counts, kept where a conditional reads the counter of a loop
    # whose trip count is unknown: its branch per trip depends on the count, which no polynomial
    # with one coefficient per term follows; the polynomial counts its dearest branch on every
    # trip (`upper_bound`), and `evaluate` resolves it per trip at the counts it is given.
    recount: Recount | None = field(default=None, compare=False, repr=False)

    @property
    def upper_bound(self) -> bool:
        """Whether the polynomial is only an upper bound (a conditional on an unknown loop's counter)."""
        return self.recount is not None and not self.plan

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.symbols)

    def metric_terms(self, metric: str) -> list[tuple[int, tuple[str, ...]]]:
        """(coefficient, sorted symbols) of each term with a non-zero coefficient of `metric`."""
        return [(getattr(cost, metric), tuple(sorted(mono))) for mono, cost in self.terms if getattr(cost, metric)]

    @property
    def bound_only(self) -> bool:
        """Whether the polynomial holds only for some counts, or as a bound (`notes` say where)."""
        return bool(self.notes)

    def evaluate(self, counts: Mapping[str, int]) -> Totals:
        """The totals with each symbol at its count in `counts` (every symbol, nothing else):
        what `account(trip_counts=counts)` gives."""
        values = _checked_counts(self, counts)
        if self.recount is not None:
            return self.recount(values)
        if self.plan:
            total = _fold(self.plan, values)
            return Totals(total.flops, total.transcendentals, total.bytes_accessed)
        return self.polynomial_at(values)

    def polynomial_at(self, counts: Mapping[str, int]) -> Totals:
        """The polynomial's terms summed at `counts` (what the printed formula says)."""
        values = _checked_counts(self, counts)
        total = ZERO
        for mono, cost in self.terms:
            times = 1
            for name in mono:
                times *= values[name]
            if times:
                total = total + cost.scaled(times)
        return Totals(total.flops, total.transcendentals, total.bytes_accessed)

    def at_lower_bounds(self) -> Totals:
        return self.evaluate({s.name: s.lower for s in self.symbols})

    def at_upper_bounds(self) -> Totals | None:
        """The totals with every symbol at its proved upper bound; None if one has none."""
        if any(s.upper is None for s in self.symbols):
            return None
        return self.evaluate({s.name: s.upper for s in self.symbols})


def _checked_counts(formula: Formula, counts: Mapping[str, int]) -> dict[str, int]:
    names = set(formula.names)
    missing = sorted(names - set(counts))
    extra = sorted(set(counts) - names)
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"no count for {', '.join(missing)}")
        if extra:
            parts.append(f"{', '.join(extra)} {'is' if len(extra) == 1 else 'are'} not an unknown trip count "
                         "(a known count is overridden with analyze(trip_counts=...))")
        raise ValueError(f"evaluate() takes a count for each unknown trip count ({', '.join(sorted(names)) or 'none'})"
                         f": {'; '.join(parts)}")
    values: dict[str, int] = {}
    for name in formula.names:
        value = counts[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"trip count of {name} must be a non-negative int, got {value!r}")
        values[name] = value
    return values


def _fold(plan: tuple[Step, ...], counts: Mapping[str, int]) -> Cost:
    """The ENTRY cost at `counts`, folded with numbers (the last step is ENTRY)."""
    inclusive: dict[str, Cost] = {}
    chosen: dict[str, str] = {}  # conditional -> the branch its site counted
    for name, own, sites in plan:
        parts = [own]
        for site in sites:
            if site[0] == "call":
                parts.append(inclusive[site[1]])
            elif site[0] == "while":
                _, body, cond, known, symbol = site
                n = known if known is not None else counts[symbol]
                parts += (inclusive[body].scaled(n), inclusive[cond].scaled(n + 1))
            elif site[0] == "anchored":  # the branches taken, less the one counted at each execution
                _, arms, taken, conditional, counted = site
                branch = dict(arms)
                parts += [inclusive[branch[b]].scaled(n) for b, n in enumerate(taken) if n]
                parts.append(inclusive[chosen.get(conditional, counted)].scaled(-sum(taken)))
            elif site[2] is not None:  # a constant selector's branch
                chosen[site[3]] = dict(site[1])[site[2]]
                parts.append(inclusive[chosen[site[3]]])
            else:  # the dearest branch, ties to the lower index (the accounting's rule)
                _, _, callee = max((_rank(inclusive[c]), -i, c) for i, c in site[1])
                chosen[site[3]] = callee
                parts.append(inclusive[callee])
        inclusive[name] = Cost(sum(p.flops for p in parts), sum(p.transcendentals for p in parts),
                               sum(p.bytes_accessed for p in parts))
    return inclusive[plan[-1][0]] if plan else ZERO


def _rank(cost: Cost) -> tuple[int, int, int]:
    return cost.flops, cost.transcendentals, cost.bytes_accessed


# ---- polynomial arithmetic (dict Monomial -> Cost) ----------------------------------------


def _add_into(acc: CostPolynomial, poly: CostPolynomial, times: int = 1, symbol: str | None = None) -> None:
    """acc += poly * times * (symbol if given)."""
    if not times:
        return
    for mono, cost in poly.items():
        key = tuple(sorted(mono + (symbol,))) if symbol is not None else mono
        scaled = cost.scaled(times) if times != 1 else cost
        previous = acc.get(key)
        acc[key] = scaled if previous is None else previous + scaled


def _term_order(item: tuple[Monomial, Cost]) -> tuple:
    """Most symbols first, then by name: `a x N[w1] x N[w2] + b x N[w1] + c`."""
    return (-len(item[0]), item[0])


# ---- the fold ------------------------------------------------------------------------------


def loop_formula(module: Module, order: Iterable[str], own: Mapping[str, Cost], trips: Mapping[str, TripCount],
                 branch_choice: Mapping[str, int], callers: Mapping[str, list[Instruction]], *,
                 settled: Mapping[str, Cost] | None = None, constant_branch: Mapping[str, int] | None = None,
                 anchored: Mapping[str, list] | None = None, counter_conditionals: Mapping[str, str] | None = None,
                 recount: Recount | None = None) -> Formula:
    """The ENTRY totals as a polynomial in the unknown trip counts of the loops under ENTRY.
    `order` is the computations reachable from ENTRY, callers first; `own` each computation's own
    cost per execution; `branch_choice` the accounting's chosen branch per conditional.
    `settled`: the accounting's inclusive cost per execution of each computation, taken for every
    computation with no unknown loop beneath it; `constant_branch`: the branch a constant selector
    always takes; `anchored`: the conditionals resolved per trip by the computation one execution
    of which their counts describe (hloflops.branch_totals.anchored_by_computation): there the
    fold adds the branches they take and takes away the branch their site counted, as the
    accounting does. `counter_conditionals`: conditional -> the loop of unknown trip count whose
    counter it reads; with `recount` (the accounting at given counts) `evaluate` is exact there."""
    order = list(order)
    settled = settled or {}
    constant_branch = constant_branch or {}
    anchored = anchored or {}
    unknown_beneath: dict[str, bool] = {}  # an unknown loop in the computation or any callee, any branch
    inclusive: dict[str, CostPolynomial] = {}
    symbols: dict[str, Symbol] = {}
    notes: list[str] = []
    plan: list[Step] = []
    picked: dict[str, str] = {}  # conditional -> the branch its site counted in the polynomial
    for name in reversed(order):  # callees first
        poly: CostPolynomial = {_ONE: own.get(name, ZERO)}
        steps: list[tuple] = []
        for inst in callers.get(name, ()):
            sites = [s for s in inst.calls if is_executing_site(inst, s.role) and s.computation in inclusive]
            if not sites:
                continue
            if inst.opcode == "while":
                steps.append(_add_while(poly, inst, inclusive, trips[inst.name], symbols))
                continue
            branches = [s for s in sites if s.role == CallRole.BRANCH]
            if branches:
                pick = constant_branch.get(inst.name, branch_choice.get(inst.name))
                chosen = next((s for s in branches if s.index == pick), branches[0])
                picked[inst.name] = chosen.computation
                resolved = any(i.name == inst.name for cs in anchored.values() for i, _ in cs)
                if not resolved and any(len(mono) for s in branches for mono in inclusive[s.computation]):
                    notes.append(f"conditional {inst.name}: a branch holds an unknown loop, so which branch is dearest "
                                 f"depends on the counts; the polynomial keeps branch {chosen.index} (the accounting's "
                                 "choice at the lower bounds), evaluate() chooses at the counts it is given")
                _add_into(poly, inclusive[chosen.computation])
                arms = tuple((s.index, s.computation) for s in branches)
                steps.append(("branch", arms, constant_branch.get(inst.name), inst.name))
            for site in sites:
                if site.role != CallRole.BRANCH:
                    _add_into(poly, inclusive[site.computation])
                    steps.append(("call", site.computation))
        for inst, resolution in anchored.get(name, ()):
            steps.append(_add_anchored(poly, inst, resolution, inclusive, picked, branch_choice))
        unknown_beneath[name] = any(
            (inst.opcode == "while" and trips[inst.name].value is None)
            or any(unknown_beneath.get(s.computation, False) for s in inst.calls)
            for inst in callers.get(name, ()))
        if name in settled and not unknown_beneath[name]:  # no unknown loop beneath: as accounted
            poly, steps = {_ONE: settled[name]}, []
        inclusive[name] = poly
        plan.append((name, poly[_ONE] if not steps else own.get(name, ZERO), tuple(steps)))
    entry = inclusive.get(module.entry_name, {_ONE: ZERO})
    terms = tuple(sorted(((m, c) for m, c in entry.items() if c != ZERO), key=_term_order))
    used = {s for mono, _ in terms for s in mono}
    # A symbol whose loop costs nothing (an empty body) leaves no term, but it is still unknown.
    ordered = tuple(symbols[n] for n in sorted(symbols, key=lambda n: (n not in used, n)))
    # The plan ends with ENTRY (callers come first in `order`, so ENTRY is folded last).
    kept = tuple(plan) if notes and plan and plan[-1][0] == module.entry_name else ()
    counted = {c: w for c, w in (counter_conditionals or {}).items() if w in symbols}
    for conditional, loop in sorted(counted.items()):
        notes.append(f"conditional {conditional} reads the counter of {loop}, whose trip count is unknown: the "
                     "polynomial counts its dearest branch on every trip (an upper bound); evaluate() takes its "
                     "branch per trip at the counts it is given")
    return Formula(ordered, terms, tuple(notes), kept, recount if counted and recount is not None else None)


def _add_anchored(poly: CostPolynomial, inst: Instruction, resolution, inclusive: Mapping[str, CostPolynomial],
                  picked: Mapping[str, str], branch_choice: Mapping[str, int]) -> Step:
    """poly += what a conditional resolved per trip runs per execution of its anchor, less the
    branch its site counted on each of those executions (hloflops.accounting does the same)."""
    arms = tuple((s.index, s.computation) for s in inst.calls if s.role == CallRole.BRANCH)
    branch = dict(arms)
    counts = tuple(resolution.counts or ())
    counted = picked.get(inst.name, branch[branch_choice.get(inst.name, arms[0][0])])
    for index, n in enumerate(counts):
        if n:
            _add_into(poly, inclusive[branch[index]], n)
    _add_into(poly, inclusive[counted], -sum(counts))
    return ("anchored", arms, counts, inst.name, counted)


def _add_while(poly: CostPolynomial, inst: Instruction, inclusive: Mapping[str, CostPolynomial], tc: TripCount,
               symbols: dict[str, Symbol]) -> Step:
    body_name, cond_name = inst.called(CallRole.WHILE_BODY)[0], inst.called(CallRole.WHILE_CONDITION)[0]
    body, cond = inclusive[body_name], inclusive[cond_name]
    step = ("while", body_name, cond_name, tc.value, inst.name)
    if tc.value is not None:  # body n times, condition n + 1 times
        _add_into(poly, body, tc.value)
        _add_into(poly, cond, tc.value + 1)
        return step
    symbols[inst.name] = Symbol(inst.name, tc.lower, tc.upper, tc.note)
    _add_into(poly, body, 1, inst.name)  # N x body
    _add_into(poly, cond, 1, inst.name)  # (N + 1) x condition
    _add_into(poly, cond, 1)
    return step
