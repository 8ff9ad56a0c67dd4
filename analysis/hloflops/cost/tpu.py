"""Whether a module was compiled for TPU, read from what only TPU's compiler writes.

TPU modules carry tiled layouts with memory spaces (`{1,0:T(8,128)(2,1)S(1)}`) and a
backend_config on nearly every instruction with TPU's own fields (`scoped_memory_configs`,
`window_config` with `estimated_cycles`). The text never names the chip generation (a v4 and a
v6e module of the same program differ only in their fusions and estimates); megacore chips (v4,
v5p) add `megacore_config`. Where the module came from a jax `Compiled`, its device kind says the
generation (hloflops.api).
"""

from __future__ import annotations

from hloparse.ir import Module

_MARKER = '"scoped_memory_configs"'


def is_tpu_module(module: Module) -> bool:
    """True for a module TPU's compiler wrote (computed once per module)."""
    cache = vars(module)
    if "_hloflops_is_tpu" not in cache:
        cache["_hloflops_is_tpu"] = _is_tpu(module)
    return cache["_hloflops_is_tpu"]


def _is_tpu(module: Module) -> bool:
    if ":T(" not in module.attributes.get("entry_computation_layout", ""):
        return False
    for comp in module.computations:
        for inst in comp.instructions:
            if _MARKER in (inst.attributes.get("backend_config") or ""):
                return True
    return False


def compiled_for_tpu(module: Module) -> bool:
    """A TPU module as TPU's compiler finished it (scheduled): its `compiled.cost_analysis()` is
    TPU's, which charges custom-calls differently from the HloCostAnalysis other platforms (and
    jaxlib's `hlo_module_cost_analysis`, which XLA's own TPU test modules are checked against) run."""
    return module.is_scheduled and is_tpu_module(module)
