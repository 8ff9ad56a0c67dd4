"""Parse XLA HLO text into a typed IR and a networkx call graph.

    module = hloparse.load("module_0001.jit_step.after_optimizations.txt")
    graph = module.call_graph()
"""

from hloparse.errors import HloParseError
from hloparse.ir import (
    CallRole,
    CallSite,
    Computation,
    Instruction,
    Layout,
    Module,
    Shape,
    SourceLocation,
)
from hloparse.parser import load, parse

__all__ = [
    "CallRole",
    "CallSite",
    "Computation",
    "HloParseError",
    "Instruction",
    "Layout",
    "Module",
    "Shape",
    "SourceLocation",
    "load",
    "parse",
]
