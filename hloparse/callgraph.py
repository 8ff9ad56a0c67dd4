"""The call graph of a module's computations, as a networkx MultiDiGraph.

Nodes are computation names (node attribute `computation` holds the Computation). There is one
edge per call site, caller -> callee, keyed by the calling instruction's name, with attributes
`role` (a CallRole value), `instruction` (the calling Instruction) and `index` (branch number).
"""

from __future__ import annotations

import networkx as nx

from hloparse.ir import Module


def build_call_graph(module: Module) -> nx.MultiDiGraph:
    return module.call_graph()


def reachable_from_entry(graph: nx.MultiDiGraph) -> set[str]:
    entry = graph.graph["entry"]
    return {entry} | nx.descendants(graph, entry)


def topological_from_entry(graph: nx.MultiDiGraph) -> list[str]:
    """Computations reachable from ENTRY, callers before callees (HLO call graphs are acyclic)."""
    sub = graph.subgraph(reachable_from_entry(graph))
    return list(nx.topological_sort(sub))
