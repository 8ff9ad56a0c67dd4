"""A recompute of a cheap activation nested in a backward matmul's fusion as the matmul's operand,
whose forward value this program hands out stored (after optimization, TPU only; hloflops.remat.pairing
calls `gradient_operand_copies`).

TPU nests a matmul's cheap elementwise producers inside the matmul's output fusion, as a fusion
of their own feeding the matmul's operand. A weight gradient `dW = relu(z)^T @ dy` under a policy
that saves `z` reads `relu(z)`: this program's recompute computes it from the saved `z` and XLA
nests it (and the narrow to the matmul's input type) in the gradient's fusion. The program without
remat reads the forward's `relu(z)`, which its forward fusion hands out stored; but XLA's
instruction fusion may still duplicate the cheap `max(z, 0)` into the matmul's fusion, reading the
`z` that program stores as the forward matmul's output, in place of the stored activation: on TPU
draw ntpu 159 (haiku loop, FSDP) the twin does exactly that in each layer (`relu` twice, the
narrow once, per layer, in both programs), so the recompute's copy stands in for the twin's
duplicate and is model FLOPs. Whether XLA duplicates it or reads the stored value rests on how it
fused that program: this program looks the same either way. So the copy's counted ops are a
`twin_copies` hinge of one each: the range's low end drops by them, the split keeps its count.

Only where this program shows the shape: a backward fusion whose root is a matmul (through views),
an operand of which is (through views) a nested fusion of cheap elementwise ops (no expensive op,
no reduce: XLA never duplicates those), views, constants and converts, holding a remat-named op
counted as remat whose value a forward op outside every checkpoint also computes and hands out of
its own fusion (the stored value the program without remat could read instead); and only a copy
whose inputs weigh no more than that value (`may_duplicate`: XLA duplicates such a producer into a
consumer whatever its other consumers; a layer norm's normalize reads more than it writes). On TPU
draws 0-179 it fires on ntpu 159 alone."""

from __future__ import annotations

from typing import Mapping

from hloflops.remat.names import REMAT_SCOPE
from hloflops.remat.op_kinds import DUPLICATED, EXPENSIVE, MATMUL_OPCODES
from hloflops.remat.sites import SiteKey, SiteOp
from hloflops.scopes import phase
from hloparse.ir import CallRole, Computation, Instruction, Module

_VIEWS = frozenset({"bitcast", "copy", "reshape", "transpose"})
# What a nested copy of a cheap activation may hold besides its cheap ops: nothing that computes
# (a narrowing or widening convert is the matmul operand's own cast).
_FREE = frozenset({"parameter", "constant", "broadcast", "convert", "iota"}) | _VIEWS
_CHEAP = DUPLICATED - EXPENSIVE


def gradient_operand_copies(module: Module, ops: list[SiteOp], remat: set[SiteKey],
                            fused: Mapping[str, frozenset[str]]) -> dict[SiteKey, int]:
    """Counted op of a nested copy -> 1: the program without remat may run it once more, in its
    own copy of the activation in the same gradient fusion (module docstring). `fused` is each
    fused computation's outputs (hloflops.remat.fusion_copies.fused_outputs)."""
    by_site: dict[str, list[SiteOp]] = {}
    for op in ops:
        by_site.setdefault(op.key[0], []).append(op)
    stored = _stored_forward_values(ops, fused)
    out: dict[SiteKey, int] = {}
    for comp, inst in module.instructions():
        if inst.opcode != "fusion" or phase(inst.op_name) != "backward":
            continue
        for callee in inst.called(CallRole.FUSION):
            body = module.by_name.get(callee)
            if body is None or body.root is None:
                continue
            for nested in matmul_operand_fusions(body):
                members = by_site.get(nested, ())
                comp_nested = module.by_name.get(nested)
                if not members or comp_nested is None or not _cheap_only(comp_nested):
                    continue
                paired = [op for op in members
                          if op.key in remat and REMAT_SCOPE in op.op_name and op.exact in stored]
                if not paired or not may_duplicate(comp_nested, paired):
                    continue
                for op in members:
                    if op.key in remat and op.inst.opcode in _CHEAP | {"convert"}:
                        out[op.key] = 1
    return out


def _stored_forward_values(ops: list[SiteOp], fused: Mapping[str, frozenset[str]]) -> set[object]:
    """The value numbers a forward op outside every checkpoint hands out of its fusion."""
    return {op.exact for op in ops
            if op.inst.name in fused.get(op.key[0], ()) and outside_checkpoints(op.op_name)
            and phase(op.op_name) == "forward" and op.inst.opcode in _CHEAP}


def outside_checkpoints(name: str) -> bool:
    return bool(name) and "checkpoint" not in name and "remat" not in name


def matmul_operand_fusions(body: Computation) -> list[str]:
    """The fused computations of the nested fusions that feed, through views, an operand of the
    matmul at the body's root (through views)."""
    root: Instruction | None = body.root
    while root is not None and root.opcode in _VIEWS:
        root = body.by_name.get(root.operands[0])
    if root is None or root.opcode not in MATMUL_OPCODES:
        return []
    out: list[str] = []
    for name in root.operands:
        inst = body.by_name.get(name)
        while inst is not None and inst.opcode in _VIEWS:
            inst = body.by_name.get(inst.operands[0])
        if inst is not None and inst.opcode == "fusion":
            out += inst.called(CallRole.FUSION)
    return out


def may_duplicate(comp: Computation, paired: list[SiteOp]) -> bool:
    """Would XLA's instruction fusion duplicate the activation into a consumer regardless of its
    other consumers? `InstructionFusion::ComputeGloballyUnfusible` lets it where the producer's
    operands weigh no more than its output (duplicating it adds no memory traffic): the copy's
    inputs (the nested fusion's parameters) against the widest paired value it computes. A layer
    norm's `(x - mean) * r` reads more than it writes and is left out."""
    inputs = sum(inst.shape.byte_size() for inst in comp.instructions if inst.opcode == "parameter")
    return inputs <= max(op.inst.shape.byte_size() for op in paired)


def _cheap_only(comp: Computation) -> bool:
    """Only cheap elementwise ops, views, constants and converts (what XLA may copy into a consumer)."""
    return all(inst.opcode in _CHEAP or inst.opcode in _FREE for inst in comp.instructions)
