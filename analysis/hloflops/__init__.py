"""Exact, loop- and remat-aware costs of XLA HLO modules.

    from hloflops import analyze, compare
    report = analyze("examples/seed000_remat_scan.after_optimizations.hlo")
    report.flops, report.xla_estimate["flops"], report.loops
    report = count(train_step)(params, batch)            # from hloflops import count: jit + compile + analyse (jax)

The parser's entry points are here too (`hloflops.parse`, `hloflops.load`, `hloflops.Module`,
`hloflops.HloParseError`, ...): they are `hloparse`'s own objects, so `import hloflops` is the one
import a user needs; `hloparse` stays importable on its own for those who want only the parser.

The names are resolved lazily (PEP 562) so that importing a submodule (`hloflops.cost.costs`, the
accounting) never drags in the product layer, and `import hloflops` stays cheap (no lark, networkx
or jax until a name is used).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# The one place the version is written: pyproject reads it (dynamic version), `hloflops --version`
# prints it without asking importlib.metadata (which walks every entry of sys.path).
__version__ = "0.1.0"

if TYPE_CHECKING:
    from hloflops.api import Comparison, analyze, compare
    from hloflops.notebook import count
    from hloflops.report.report import MFU, Report
    from hloparse import (CallRole, CallSite, Computation, HloParseError, Instruction, Layout, Module, Shape,
                          SourceLocation, load, parse)

# The parser's public names, re-exported from hloparse (its __all__; a test checks the two agree).
_PARSER_NAMES = ("CallRole", "CallSite", "Computation", "HloParseError", "Instruction", "Layout", "Module", "Shape",
                 "SourceLocation", "load", "parse")

__all__ = ["MFU", "Comparison", "Report", "analyze", "compare", "count",
           "CallRole", "CallSite", "Computation", "HloParseError", "Instruction", "Layout", "Module", "Shape",
           "SourceLocation", "load", "parse"]

_HOME = {
    "analyze": "hloflops.api",
    "compare": "hloflops.api",
    "count": "hloflops.notebook",
    "Comparison": "hloflops.api",
    "Report": "hloflops.report.report",
    "MFU": "hloflops.report.report",
    **{name: "hloparse" for name in _PARSER_NAMES},
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'hloflops' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(home), name)


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
