"""How many times every computation runs, from ENTRY through the call graph.

Only CONTROL call roles execute a callee as a computation of its own (`CallRole.CONTROL`);
reducers, comparators and other APPLIED callees are costed inside their calling instruction.

    while        body: n per execution of the while, condition: n + 1 (it runs once more to exit)
    fusion/call  1
    async-start  1 (the -update / -done halves of the same op do not run it again)
    conditional  resolved (`taken`: hloflops.loops.branches): each branch runs its share of the
                 conditional's executions, exactly (`known`); otherwise the branch chosen in
                 `branch_choice` runs once, the others 0; a conditional whose branch is not
                 chosen runs each branch once ("if taken"). Unresolved branch executions are
                 never `known`: which branch runs is data.

A computation called from several sites sums them; nested loops multiply. Every instruction of
a computation runs once per execution of the computation. When a trip count is unknown, the
body counts its lower bound and everything beneath it is marked not known.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from hloflops.graph import call_table, is_executing_site, module_control_order
from hloflops.loops.tripcount import TripCount, trip_count
from hloparse.ir import CallRole, Computation, Instruction, Module

__all__ = ["ExecutionCounts", "control_order", "execution_counts", "is_executing_site", "site_multiplier"]


@dataclass(frozen=True)
class ExecutionCounts:
    computations: Mapping[str, int]  # computation -> executions (a lower bound where not known)
    known: Mapping[str, bool]  # computation -> are its executions exact
    trip_counts: Mapping[str, TripCount]  # while instruction -> its trip count
    loop_of: Mapping[str, str | None]  # computation -> innermost enclosing while instruction
    fusion_of: Mapping[str, str | None]  # computation -> outermost fusion instruction around it
    while_sites: Mapping[str, str] = field(default_factory=dict)  # while instruction -> its computation
    order: tuple[str, ...] = ()  # computations reachable from ENTRY, callers before callees

    def of(self, computation: Computation | str) -> int:
        name = computation if isinstance(computation, str) else computation.name
        return self.computations.get(name, 0)

    def is_known(self, computation: Computation | str) -> bool:
        name = computation if isinstance(computation, str) else computation.name
        return self.known.get(name, True)

    def parent_loop(self, while_name: str) -> str | None:
        """The loop enclosing a while instruction, if any."""
        return self.loop_of.get(self.while_sites.get(while_name, ""))


def control_order(module: Module) -> list[str]:
    """Computations reachable from ENTRY through CONTROL calls, callers before callees (the
    call graph's walk, hloflops.graph.control_order, on the module's call table)."""
    return module_control_order(module)


def site_multiplier(inst: Instruction, role: CallRole, index: int, trips: Mapping[str, TripCount],
                    branch_choice: Mapping[str, int] | None) -> tuple[int, bool]:
    """(executions of the callee per execution of the calling instruction, exact?)"""
    if role == CallRole.WHILE_BODY or role == CallRole.WHILE_CONDITION:
        tc = trips[inst.name]
        n = tc.value if tc.value is not None else tc.lower
        return (n if role == CallRole.WHILE_BODY else n + 1), tc.value is not None
    if role == CallRole.BRANCH:
        n_branches = sum(1 for s in inst.calls if s.role == CallRole.BRANCH)
        if n_branches == 1:
            return 1, True
        if branch_choice is not None and inst.name in branch_choice:
            return (1 if branch_choice[inst.name] == index else 0), False
        return 1, False
    return 1, True


# Call roles whose callee runs other than once per execution of the caller (`site_multiplier`).
_MULTIPLIED = frozenset({CallRole.WHILE_BODY, CallRole.WHILE_CONDITION, CallRole.BRANCH})


def execution_counts(module: Module, trip_counts: Mapping[str, TripCount] | None = None, *,
                     overrides: Mapping[str, int] | None = None,
                     branch_choice: Mapping[str, int] | None = None,
                     taken: Mapping[str, tuple[int, ...]] | None = None) -> ExecutionCounts:
    """Executions of every computation reachable from ENTRY. `trip_counts` (while name ->
    TripCount) are computed with `overrides` where not given. `taken` (conditional name ->
    executions of each branch per `sum(...)` executions of the conditional) overrides
    `branch_choice` for the conditionals it names."""
    taken = taken or {}
    trips = dict(trip_counts or {})
    order = control_order(module)
    counts: dict[str, int] = {name: 0 for name in order}
    known: dict[str, bool] = {name: True for name in order}
    loop_of: dict[str, str | None] = {}
    fusion_of: dict[str, str | None] = {}
    while_sites: dict[str, str] = {}
    counts[module.entry_name] = 1
    loop_of[module.entry_name] = None
    fusion_of[module.entry_name] = None
    calls = call_table(module).calls
    for name in order:  # callers first: a caller's count is final before its callees read it
        sites = calls.get(name)
        if not sites:
            continue
        for callee, site in sites:
            inst, role = site["instruction"], site["role"]
            if callee not in counts or not is_executing_site(inst, role):
                continue
            if role in _MULTIPLIED:
                if inst.opcode == "while" and inst.name not in while_sites:
                    while_sites[inst.name] = name
                    if inst.name not in trips:
                        trips[inst.name] = trip_count(module, module.by_name[name], inst, overrides)
                if role == CallRole.BRANCH and inst.name in taken:
                    shares = taken[inst.name]
                    # No trip reaches it (a loop of 0 trips around it): its branches never run.
                    runs, rest = divmod(counts[name] * shares[site["index"]], sum(shares)) if sum(shares) else (0, 0)
                    if rest:  # the resolution promised whole executions: anything else is a bug
                        raise AssertionError(f"{inst.name}: {counts[name]} executions do not split as {shares}")
                    counts[callee] += runs
                    exact = True
                else:
                    times, exact = site_multiplier(inst, role, site["index"], trips, branch_choice)
                    counts[callee] += counts[name] * times
            else:  # a fusion, call or async op runs its callee once
                counts[callee] += counts[name]
                exact = True
            known[callee] = known[callee] and known[name] and exact
            if callee not in loop_of:  # first caller in order decides the context
                in_loop = role == CallRole.WHILE_BODY or role == CallRole.WHILE_CONDITION
                loop_of[callee] = inst.name if in_loop else loop_of.get(name)
                fusion_of[callee] = fusion_of.get(name) or (inst.name if role == CallRole.FUSION else None)
    return ExecutionCounts(counts, known, trips, loop_of, fusion_of, while_sites, tuple(order))
