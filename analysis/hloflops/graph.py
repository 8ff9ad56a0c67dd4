"""The call graph every walk of the analysis runs on, and the walks, as plain functions.

`call_graph(module)` is `Module.call_graph()` (networkx MultiDiGraph: one node per computation,
one edge per call site, caller -> callee, with `role`, `instruction` and `index` as edge data),
built once per module. Every walk here is iterative: a module may nest computations to any
depth. The accounting's own walks (`call_table`, `module_*` below) read the same call sites from
plain dicts, built once per module: networkx's graph and views cost more than the walks.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from hloparse.ir import CallRole, Instruction, Module

if TYPE_CHECKING:  # imported by the walks that use it: the accounting's own walks do not (start-up)
    import networkx as nx

_GRAPHS: "weakref.WeakKeyDictionary[Module, nx.MultiDiGraph]" = weakref.WeakKeyDictionary()
_CALLS_FROM: "weakref.WeakKeyDictionary[nx.MultiDiGraph, dict]" = weakref.WeakKeyDictionary()
_CONTROL_ORDER: "weakref.WeakKeyDictionary[nx.MultiDiGraph, tuple[str, ...]]" = weakref.WeakKeyDictionary()
_TABLES: "weakref.WeakKeyDictionary[Module, CallTable]" = weakref.WeakKeyDictionary()


def call_graph(module: Module) -> nx.MultiDiGraph:
    """The module's call graph (built once; the module is immutable)."""
    graph = _GRAPHS.get(module)
    if graph is None:
        graph = _GRAPHS[module] = module.call_graph()
    return graph


def calls_from(graph: nx.MultiDiGraph) -> dict[str, list[tuple[str, dict]]]:
    """Each computation's call sites as (callee, edge data), in the graph's edge order, listed
    once per graph (one pass over the edges instead of a view per computation)."""
    table = _CALLS_FROM.get(graph)
    if table is None:
        table = {}
        for caller, callee, data in graph.edges(data=True):
            table.setdefault(caller, []).append((callee, data))
        _CALLS_FROM[graph] = table
    return table


def is_executing_site(inst: Instruction, role: CallRole) -> bool:
    """Does this call site run the callee as a computation of its own? Only CONTROL roles do;
    the async-update/-done halves name the same computation as their async-start but do not
    run it again."""
    if role not in CallRole.CONTROL:
        return False
    if role == CallRole.ASYNC:
        return not (inst.opcode.endswith("-done") or inst.opcode.endswith("-update"))
    return True


def executing_callees(graph: nx.MultiDiGraph, name: str) -> list[str]:
    """The computations `name` runs (each once, in the order its instructions call them)."""
    nodes = graph.nodes
    return _executing(calls_from(graph).get(name, ()), lambda callee: "computation" in nodes[callee])


def _executing(sites: Iterable[tuple[str, dict]], is_computation: Callable[[str], bool]) -> list[str]:
    """The callees of (callee, site) pairs that run as computations of their own, each once."""
    found = [callee for callee, site in sites
             if is_executing_site(site["instruction"], site["role"]) and is_computation(callee)]
    return list(dict.fromkeys(found))


def control_order(graph: nx.MultiDiGraph) -> list[str]:
    """Computations reachable from ENTRY through executing call sites, callers before callees
    (reverse post-order of a depth-first walk that takes a computation's callees last first).
    Walked once per graph: the accounting asks for it several times."""
    order = _CONTROL_ORDER.get(graph)
    if order is None:
        order = _CONTROL_ORDER[graph] = tuple(_control_order(graph))
    return list(order)


def _control_order(graph: nx.MultiDiGraph) -> list[str]:
    return _callers_first(graph.graph["entry"], lambda name: executing_callees(graph, name))


def _callers_first(root: str, callees_of: Callable[[str], list[str]]) -> list[str]:
    order: list[str] = []
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    state[root] = 1
    stack: list[tuple[str, list[str]]] = [(root, callees_of(root))]
    while stack:
        name, pending = stack[-1]
        if pending:
            nxt = pending.pop()
            if state.get(nxt) == 1:
                raise ValueError(f"call graph cycle through {nxt}")
            if nxt not in state:
                state[nxt] = 1
                stack.append((nxt, callees_of(nxt)))
            continue
        stack.pop()
        state[name] = 2
        order.append(name)
    order.reverse()
    return order


def bottom_up(graph: nx.MultiDiGraph, roots: Iterable[str] | None = None) -> list[str]:
    """Computations (all of them, or those reachable from `roots` through any call), every
    callee before its callers."""
    import networkx as nx

    if roots is not None:
        keep: set[str] = set()
        for root in roots:
            if root in graph and root not in keep:
                keep.add(root)
                keep |= nx.descendants(graph, root)
        graph = graph.subgraph(keep)
    try:
        order = list(nx.topological_sort(graph))
    except nx.NetworkXUnfeasible:
        cycle = [edge[0] for edge in nx.find_cycle(graph)]
        raise ValueError(f"the call graph has a cycle through {', '.join(cycle)}") from None
    order.reverse()
    return order


def with_descendants(graph: nx.MultiDiGraph, roots: Iterable[str]) -> set[str]:
    """The roots and every computation they call, directly or not."""
    import networkx as nx

    found: set[str] = set()
    for root in roots:
        if root in graph and root not in found:
            found.add(root)
            found |= nx.descendants(graph, root)
    return found


def call_sites(graph: nx.MultiDiGraph, callee: str) -> Iterator[tuple[str, Instruction, str]]:
    """(calling computation, calling instruction, role) of every call of `callee`, in module
    order."""
    for caller, _, data in graph.in_edges(callee, data=True):
        yield caller, data["instruction"], data["role"]


# Call roles through which a callee's bytes (and optimal seconds) never reach the caller's
# totals in XLA's view: a fusion replaces them by its boundary bytes, an applied body hands back
# only flops and transcendentals, a custom-call's computation is never visited.
BYTES_STOP_AT = frozenset({CallRole.FUSION, CallRole.TO_APPLY, CallRole.CUSTOM_CALL})


# ---- the same call sites as plain dicts ------------------------------------------------------
Site = dict  # {"role": CallRole, "instruction": Instruction, "index": int}, as on a graph edge


@dataclass(eq=False)
class CallTable:
    """The call graph's edges as plain dicts: each caller's (callee, site) pairs in the graph's
    edge order (grouped by callee, callees in the order first called), and the names that are
    computations (a callee may name none)."""

    entry: str
    calls: dict[str, list[tuple[str, Site]]]
    computations: frozenset[str]
    _order: list[str] | None = field(default=None, repr=False)  # module_control_order, once


def call_table(module: Module) -> CallTable:
    """The module's call sites as a CallTable (built once; the module is immutable)."""
    table = _TABLES.get(module)
    if table is None:
        calls: dict[str, list[tuple[str, Site]]] = {}
        for comp in module.computations:
            grouped: dict[str, list[tuple[str, Site]]] = {}
            for inst in comp.instructions:
                for site in inst.calls:
                    grouped.setdefault(site.computation, []).append(
                        (site.computation, {"role": site.role, "instruction": inst, "index": site.index}))
            if grouped:
                calls[comp.name] = [pair for pairs in grouped.values() for pair in pairs]
        table = _TABLES[module] = CallTable(module.entry_name, calls, frozenset(module.by_name))
    return table


def module_control_order(module: Module) -> list[str]:
    """`control_order(call_graph(module))` from the call table."""
    table = call_table(module)
    if table._order is None:
        is_computation = table.computations.__contains__
        table._order = _callers_first(table.entry, lambda name: _executing(table.calls.get(name, ()), is_computation))
    return list(table._order)


def module_bottom_up(module: Module) -> list[str]:
    """`bottom_up(call_graph(module))` in effect: every computation (and every callee name), each
    callee before its callers (post-order of a depth-first walk; a cycle raises as bottom_up
    does)."""
    calls = call_table(module).calls
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    order: list[str] = []
    for root in module.by_name:  # a callee that names no computation is met through its caller
        if root in state:
            continue
        state[root] = 1
        stack = [(root, [callee for callee, _ in reversed(calls.get(root, ()))])]
        while stack:
            name, pending = stack[-1]
            if pending:
                nxt = pending.pop()
                seen = state.get(nxt)
                if seen == 1:
                    return bottom_up(call_graph(module))  # raises, naming the cycle as networkx finds it
                if seen is None:
                    state[nxt] = 1
                    stack.append((nxt, [callee for callee, _ in reversed(calls.get(nxt, ()))]))
                continue
            stack.pop()
            state[name] = 2
            order.append(name)
    return order


def module_bytes_unobserved(module: Module, order: list[str]) -> set[str]:
    """Computations whose XLA bytes total no caller ever reads: every call of them goes through
    a role in BYTES_STOP_AT or comes from a computation that is itself unobserved. `order` is
    `module_bottom_up(module)`. Walked from the callers down: ENTRY and the computations nobody
    calls are observed, and so is whatever an observed one calls through another role."""
    calls = call_table(module).calls
    called = {callee for sites in calls.values() for callee, _ in sites}
    observed = {name for name in order if name not in called}
    observed.add(module.entry_name)
    for name in reversed(order):  # callers first: a computation is decided before its callees
        if name in observed:
            for callee, site in calls.get(name, ()):
                if site["role"] not in BYTES_STOP_AT:
                    observed.add(callee)
    return set(order) - observed
