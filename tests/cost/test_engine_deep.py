"""The engine walks the call graph without recursion: any nesting depth is analysed."""

from __future__ import annotations

import hloparse
from hloflops import analyze
from hloflops.graph import bottom_up, call_graph, control_order

DEPTH = 3000  # well past Python's default recursion limit of 1000


def _chain(depth: int) -> str:
    """ENTRY calls c1, which calls c2, ... down to c{depth}, which adds one to its input."""
    parts = ["HloModule deep\n"]
    last = f"c{depth}"
    parts.append(f"{last} {{\n  p = f32[8]{{0}} parameter(0)\n  ROOT r = f32[8]{{0}} add(p, p)\n}}\n")
    for i in range(depth - 1, 0, -1):
        parts.append(f"c{i} {{\n  p = f32[8]{{0}} parameter(0)\n"
                     f"  ROOT r = f32[8]{{0}} call(p), to_apply=c{i + 1}\n}}\n")
    parts.append("ENTRY main {\n  p = f32[8]{0} parameter(0)\n  ROOT r = f32[8]{0} call(p), to_apply=c1\n}\n")
    return "\n".join(parts)


def test_a_deep_chain_of_calls_is_walked_without_recursion() -> None:
    module = hloparse.parse(_chain(DEPTH))
    graph = call_graph(module)
    assert control_order(graph)[:2] == ["main", "c1"]
    assert bottom_up(graph)[0] == f"c{DEPTH}"
    report = analyze(module)
    assert report.flops == 8  # the one add at the bottom, run once
    assert report.xla_estimate["flops"] == 8.0
    assert report.uncounted == ()
