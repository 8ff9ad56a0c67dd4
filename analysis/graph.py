"""The call graph every walk of the analysis runs on, and the walks, as plain functions.

`call_graph(module)` is `Module.call_graph()` (networkx MultiDiGraph: one node per computation,
one edge per call site, caller -> callee, with `role`, `instruction` and `index` as edge data),
built once per module. Every walk here is iterative: a module may nest computations to any
depth.
"""

from __future__ import annotations

import weakref
from typing import Iterable, Iterator

import networkx as nx

from hloparse.ir import CallRole, Instruction, Module

_GRAPHS: "weakref.WeakKeyDictionary[Module, nx.MultiDiGraph]" = weakref.WeakKeyDictionary()
_CALLS_FROM: "weakref.WeakKeyDictionary[nx.MultiDiGraph, dict]" = weakref.WeakKeyDictionary()
_CONTROL_ORDER: "weakref.WeakKeyDictionary[nx.MultiDiGraph, tuple[str, ...]]" = weakref.WeakKeyDictionary()


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
    found = [callee for callee, data in calls_from(graph).get(name, ())
             if is_executing_site(data["instruction"], data["role"]) and "computation" in nodes[callee]]
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
    order: list[str] = []
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    root = graph.graph["entry"]
    state[root] = 1
    stack: list[tuple[str, list[str]]] = [(root, executing_callees(graph, root))]
    while stack:
        name, pending = stack[-1]
        if pending:
            nxt = pending.pop()
            if state.get(nxt) == 1:
                raise ValueError(f"call graph cycle through {nxt}")
            if nxt not in state:
                state[nxt] = 1
                stack.append((nxt, executing_callees(graph, nxt)))
            continue
        stack.pop()
        state[name] = 2
        order.append(name)
    order.reverse()
    return order


def bottom_up(graph: nx.MultiDiGraph, roots: Iterable[str] | None = None) -> list[str]:
    """Computations (all of them, or those reachable from `roots` through any call), every
    callee before its callers."""
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


def bytes_unobserved(graph: nx.MultiDiGraph, order: list[str] | None = None) -> set[str]:
    """Computations whose XLA bytes total no caller ever reads: every call of them goes through
    a role in BYTES_STOP_AT or comes from a computation that is itself unobserved. `order` is
    `bottom_up(graph)` where the caller has it."""
    callers: dict[str, list[tuple[str, CallRole]]] = {}
    for caller, callee, role in graph.edges(data="role"):
        callers.setdefault(callee, []).append((caller, role))
    entry = graph.graph["entry"]
    unobserved: set[str] = set()
    for name in reversed(order if order is not None else bottom_up(graph)):  # callers first
        calls = callers.get(name)
        if name == entry or not calls:
            continue
        if all(role in BYTES_STOP_AT or caller in unobserved for caller, role in calls):
            unobserved.add(name)
    return unobserved
