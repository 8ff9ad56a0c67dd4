"""Exact, loop- and remat-aware costs of XLA HLO modules.

    from hloflops import analyze, compare
    report = analyze("examples/seed000_remat_scan.after_optimizations.hlo")
    report.flops, report.xla_estimate["flops"], report.loops
    report = count(train_step)(params, batch)            # from hloflops import count: jit + compile + analyse (jax)

The names are resolved lazily (PEP 562) so that importing a submodule (`hloflops.cost.costs`, the
accounting) never drags in the product layer, and `import analysis` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hloflops.api import Comparison, analyze, compare
    from hloflops.notebook import count
    from hloflops.report.report import MFU, Report

__all__ = ["MFU", "Comparison", "Report", "analyze", "compare", "count"]

_HOME = {
    "analyze": "hloflops.api",
    "compare": "hloflops.api",
    "count": "hloflops.notebook",
    "Comparison": "hloflops.api",
    "Report": "hloflops.report.report",
    "MFU": "hloflops.report.report",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'hloflops' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(home), name)


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
