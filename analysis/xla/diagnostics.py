"""XLA's diagnostic cost keys, per instruction: `bytes accessed{i}{index}` (bytes read from
operand i), `bytes accessedout{index}` (bytes written) and `utilization{i}{}` (the fraction of
operand i used). They never enter flops or bytes accessed; `xla_estimate(..., diagnostics=True)`
sums them the way XLA does, to reproduce the whole dict `cost_analysis()` returns.

Values are plain Python numbers here (ints, or floats for utilization ratios and halves); the
estimator rounds each to float32 where XLA stores it.
"""

from __future__ import annotations

from analysis.cost import fusion_bytes
from analysis.cost.rules import custom_fusion_gather_or_scatter, value_size
from analysis.cost.shapes import array_subshapes, elements, output_size, size, transpose_is_bitcast
from hloparse.ir import CallRole, Computation, Instruction, Module


def operand_key(i: int, index: tuple[int, ...] = ()) -> str:
    return f"bytes accessed{i}{_index(index)}"


def out_key(index: tuple[int, ...] = ()) -> str:
    return f"bytes accessedout{_index(index)}"


def utilization_key(i: int) -> str:
    return f"utilization{i}{{}}"


def _ratio(a: int, b: int) -> float:
    """`1.0 * a / b` with IEEE semantics (C++ gives inf or nan for b == 0)."""
    if b == 0:
        return float("nan") if a == 0 else float("inf") * (1 if a > 0 else -1)
    return a / b


def _index(index: tuple[int, ...]) -> str:
    return "{" + ",".join(map(str, index)) + "}"


def preprocess(comp: Computation, inst: Instruction) -> dict[str, float]:
    """XLA's defaults for every instruction: result bytes written, each operand read whole, each
    operand fully used."""
    keys: dict[str, float] = {out_key(): _result_size(comp, inst)}
    for i, name in enumerate(inst.operands):
        keys[operand_key(i)] = value_size(comp, name)
        keys[utilization_key(i)] = 1.0
    return keys


def _result_size(comp: Computation, inst: Instruction) -> int:
    if inst.opcode == "send":
        return value_size(comp, inst.operands[0]) + 4
    if inst.opcode == "recv":
        data = inst.shape.tuple_shapes[0] if inst.shape.is_tuple else inst.shape
        return output_size(data) + 4
    if inst.opcode in ("send-done", "outfeed"):  # XLA's parser gives both the shape token[]
        return 0
    return output_size(inst.shape)


def own_keys(module: Module, comp: Computation, inst: Instruction) -> dict[str, float]:
    """The diagnostic keys of an instruction without a CONTROL callee (or a kCustom
    gather/scatter fusion, which XLA costs as that op)."""
    keys = preprocess(comp, inst)
    op = inst.opcode
    shapes = [comp.by_name[o].shape for o in inst.operands]
    if op in ("parameter", "constant"):
        keys[out_key()] = 0
    elif op in ("get-tuple-element", "bitcast") or (
            op == "transpose" and transpose_is_bitcast(shapes[0], inst.shape, inst.dimensions or ())):
        keys[out_key()] = 0
        keys[operand_key(0)] = 0
    elif op in ("domain", "after-all", "add-dependency"):
        keys[out_key()] = 0
        for i in range(len(inst.operands)):
            keys[operand_key(i)] = 0
    elif op == "tuple":
        keys[out_key()] = size(inst.shape)
        for i in range(len(inst.operands)):
            keys[operand_key(i)] = 0
    elif op == "slice":
        keys.update({out_key(): size(inst.shape), operand_key(0): size(inst.shape),
                     utilization_key(0): _ratio(elements(inst.shape), elements(shapes[0]))})
    elif op == "dynamic-slice":
        keys.update({out_key(): size(inst.shape), operand_key(0): size(inst.shape),
                     operand_key(1): value_size(comp, inst.operands[1]),
                     utilization_key(0): _ratio(elements(inst.shape), elements(shapes[0]))})
    elif op == "dynamic-update-slice":
        update = value_size(comp, inst.operands[1])
        keys.update({out_key(): update, operand_key(0): 0, operand_key(1): update,
                     operand_key(2): value_size(comp, inst.operands[2]),
                     utilization_key(0): _ratio(elements(inst.shape) - elements(shapes[1]), elements(inst.shape))})
    elif op == "gather":
        _gather(keys, comp, inst)
    elif op == "scatter":
        _scatter(keys, comp, inst)
    elif op == "fusion":
        body = module.computation(inst.called(CallRole.FUSION)[0])
        special = custom_fusion_gather_or_scatter(inst, body)
        if special is not None:
            (_scatter if special.opcode == "scatter" else _gather)(keys, body, special)
    elif op == "infeed":
        total = 0
        for index, leaf in inst.shape.leaves_with_index():
            keys[out_key(index)] = size(leaf)
            total += size(leaf)
        keys[out_key()] = total
    elif op == "outfeed":
        for i, shape in enumerate(shapes):
            total = 0
            for index, leaf in shape.leaves_with_index():
                keys[operand_key(i, index)] = size(leaf)
                total += size(leaf)
            keys[operand_key(i)] = total
    elif op == "triangular-solve":
        keys[out_key()] = size(inst.shape)
        keys[operand_key(0)] = value_size(comp, inst.operands[1])  # XLA writes operand 0's key twice
    elif op == "cholesky":
        keys[out_key()] = size(shapes[0]) / 2
        keys[operand_key(0)] = size(shapes[0]) / 2
    elif op in ("all-reduce", "all-reduce-start"):
        keys[out_key()] = sum(size(s) for _, s in array_subshapes(inst.shape))
    elif op == "custom-call":
        keys[out_key()] = -1
        for i in range(len(inst.operands)):
            keys[operand_key(i)] = -1
    return keys


def _gather(keys: dict[str, float], comp: Computation, gather: Instruction) -> None:
    out = size(gather.shape)
    keys.update({operand_key(0): out, operand_key(1): value_size(comp, gather.operands[1]),
                 utilization_key(0): _ratio(elements(gather.shape), elements(comp.by_name[gather.operands[0]].shape)),
                 out_key(): out})


def _scatter(keys: dict[str, float], comp: Computation, scatter: Instruction) -> None:
    n = (len(scatter.operands) - 1) // 2
    total = 0
    for i in range(n):
        update = value_size(comp, scatter.operands[n + 1 + i])
        keys[operand_key(i)] = update
        keys[operand_key(n + 1 + i)] = update
        total += update
    keys[operand_key(n)] = value_size(comp, scatter.operands[n])
    keys[out_key()] = total


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
