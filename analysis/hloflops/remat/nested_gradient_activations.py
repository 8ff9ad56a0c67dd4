"""A recomputed activation nested in a weight gradient's operand, where the forward hands the
activation to a windowed einsum (after optimization, TPU, partitioned; hloflops.remat.pairing calls
`nested_gradient_activations` beside hloflops.remat.gradient_operand_copies).

TPU nests a matmul's elementwise producers inside the matmul's output fusion, as a fusion of their
own feeding the matmul's operand. A weight gradient `dW = act(h)^T @ dy` reads `act(h)`: with remat
the recompute computes it from the recomputed `h` and XLA nests it in the gradient's fusion. Where
the forward's next matmul `act(h) @ w2` runs as a windowed einsum unrolled in place (FSDP: the
rows passed around by `collective-permute`), the forward computes `act(h)` in a fusion of its own,
named for that matmul, and hands it to the fusion cutting it into windows. The program without
remat does the same in its forward, and still nests a copy of `act(h)`, from the `h` it stores, in
its weight gradient's fusion rather than read the stored value: utpu draws 196 (scan_unrolled,
relu and its narrow, 1,536 + 1,536) and 209 (eqx_list, gelu's whole chain, `tanh` included:
multiply 3,072 and add 1,024 of the recompute's copies are that program's own). So the recompute's
copy may be the program without remat's gradient copy; whether XLA nests it or reads the stored
value rests on how it fused that program, which this program does not show. Each counted op of the
nested copy is a `twin_copies` hinge of one: the range's low end drops by it, the split keeps its
count.

hloflops.remat.gradient_operand_copies asks the same of a copy whose forward value, equal by value
number, the forward hands out stored, and of cheap ops only. Here no number meets: the
partitioner ran the forward's `h` as windows and the recompute's whole
(hloflops.remat.windowed_forward_recomputes). So the forward copy is an op outside every
checkpoint of the copy's opcode and shape reading the same frame inputs (hloflops.remat.inputs:
one layer's weights, not another's), handed out of a forward fusion named for a matmul that its
frame collective-permutes under that name; and the nested fusion holds elementwise ops, views,
constants and converts only (no reduce), reading no more than it writes (`_reads_no_more`)."""

from __future__ import annotations

from typing import Mapping

from hloflops.remat.gradient_operand_copies import matmul_operand_fusions, may_duplicate, outside_checkpoints
from hloflops.remat.inputs import FrameInputs
from hloflops.remat.names import REMAT_SCOPE
from hloflops.remat.op_kinds import DUPLICATED, shape_key
from hloflops.remat.sites import SiteKey, SiteOp
from hloflops.scopes import phase
from hloparse.ir import CallRole, Computation, Module

_VIEWS = frozenset({"bitcast", "copy", "reshape", "transpose"})
_FREE = frozenset({"parameter", "constant", "broadcast", "convert", "iota"}) | _VIEWS


def nested_gradient_activations(module: Module, ops: list[SiteOp], remat: set[SiteKey],
                                fused: Mapping[str, frozenset[str]]) -> Mapping[SiteKey, int]:
    """Counted op of a nested recompute copy in a backward matmul's operand -> 1: the program
    without remat may run it once more, in its own copy in the same gradient fusion (module
    docstring). `fused` is each fused computation's outputs (hloflops.remat.fusion_copies)."""
    permuted: dict[str, set[str]] = {}
    for comp, inst in module.instructions():
        if inst.opcode.startswith("collective-permute") and inst.op_name:
            permuted.setdefault(comp.name, set()).add(inst.op_name)
    backward = _operand_fusions(module) if permuted else set()
    by_site: dict[str, list[SiteOp]] = {}
    for op in ops:
        if op.key[0] in backward:
            by_site.setdefault(op.key[0], []).append(op)
    if not any(op.key in remat and REMAT_SCOPE in op.op_name for members in by_site.values() for op in members):
        return {}
    # The forward's activations handed to a windowed einsum: fusions named for a matmul whose
    # windows their frame passes around under that name.
    windowed = {callee for comp, inst in module.instructions()
                if inst.opcode == "fusion" and inst.op_name in permuted.get(comp.name, ())
                and phase(inst.op_name) == "forward" for callee in inst.called(CallRole.FUSION)}
    inputs = FrameInputs(module)
    handed = {_alike(op, inputs) for op in ops if op.key[0] in windowed and op.inst.opcode in DUPLICATED
              and op.inst.name in fused.get(op.key[0], ()) and outside_checkpoints(op.op_name)}
    out: dict[SiteKey, int] = {}
    for callee, members in by_site.items():
        comp = module.by_name.get(callee)
        if comp is None or not _elementwise_only(comp):
            continue
        paired = [op for op in members if op.key in remat and REMAT_SCOPE in op.op_name
                  and op.inst.opcode in DUPLICATED and _alike(op, inputs) in handed]
        if not paired or not may_duplicate(comp, paired):
            continue
        for op in members:
            if op.key in remat and op.inst.opcode in DUPLICATED | {"convert"}:
                out[op.key] = 1
    return out


def _operand_fusions(module: Module) -> set[str]:
    """The nested fusions feeding an operand of the matmul of a backward fusion."""
    found: set[str] = set()
    for _, inst in module.instructions():
        if inst.opcode != "fusion" or phase(inst.op_name) != "backward":
            continue
        for callee in inst.called(CallRole.FUSION):
            body = module.by_name.get(callee)
            if body is not None and body.root is not None:
                found.update(matmul_operand_fusions(body))
    return found


def _alike(op: SiteOp, inputs: FrameInputs) -> tuple:
    return op.inst.opcode, shape_key(op.inst.shape), inputs.of(*op.key[:2])


def _elementwise_only(comp: Computation) -> bool:
    return all(inst.opcode in DUPLICATED or inst.opcode in _FREE for inst in comp.instructions)

