"""XLA's diagnostic cost keys, per instruction: `bytes accessed{i}{index}` (bytes read from
operand i), `bytes accessedout{index}` (bytes written) and `utilization{i}{}` (the fraction of
operand i used). They never enter flops or bytes accessed; `xla_estimate(..., diagnostics=True)`
sums them the way XLA does, to reproduce the whole dict `cost_analysis()` returns.

Values are plain Python numbers here (ints, or floats for utilization ratios and halves); the
estimator rounds each to float32 where XLA stores it.
"""

from __future__ import annotations

from hloflops.cost import fusion_bytes
from hloflops.cost.registry import Charge, operand_key, out_key, utilization_key
from hloflops.cost.shapes import array_subshapes, output_size, value_size
from hloparse.ir import Computation, Instruction, Module

__all__ = ["fusion_keys", "operand_key", "out_key", "own_keys", "utilization_key"]


def own_keys(charge: Charge, comp: Computation, inst: Instruction) -> dict[str, float]:
    """The diagnostic keys of an instruction without a CONTROL callee: XLA's Preprocess defaults
    (result written whole, each operand read whole and fully used), then what its rule set."""
    keys: dict[str, float] = {out_key(): 0 if charge.io_free else output_size(inst.shape)}
    for i, name in enumerate(inst.operands):
        keys[operand_key(i)] = 0 if charge.io_free else value_size(comp, name)
        keys[utilization_key(i)] = 1.0
    keys.update(charge.keys)
    return keys


def fusion_keys(module: Module, fusion: Instruction, body: Computation) -> dict[str, float]:
    """What HandleFusion writes over the fused computation's summed keys: output bytes per
    result subshape (and their propagated sums), each fused parameter's read bytes (per tuple
    leaf too) and a utilization of 1."""
    keys: dict[str, float] = {}
    outputs = fusion_bytes.output_terms(body, fusion)
    for (index, _sub), value in zip(array_subshapes(fusion.shape), outputs):
        keys[out_key(index)] = value
    if fusion.shape.is_tuple:
        keys[out_key()] = 0
        _propagate(fusion.shape, (), keys)
    for i, param in enumerate(body.parameters):
        if param.shape.is_tuple:
            for index, _leaf in param.shape.leaves_with_index():
                keys[operand_key(i, index)] = fusion_bytes.parameter_bytes_at(module, body, param, index)
        keys[operand_key(i)] = fusion_bytes.parameter_bytes(module, body, param)
        keys[utilization_key(i)] = 1.0
    return keys


def _propagate(shape, index: tuple[int, ...], keys: dict[str, float]) -> float:
    current = keys.get(out_key(index), 0)
    if current != 0 or not shape.is_tuple:
        return current
    total = 0.0
    for i, sub in enumerate(shape.tuple_shapes):
        total += _propagate(sub, index + (i,), keys)
    keys[out_key(index)] = total
    return total
