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
draws 0-179 it fires on ntpu 159 alone.

Or a copy of a value the forward never stores. XLA fuses a cheap producer into every reader where
each can take it, whatever it reads: the forward then computes the value nested in each reader's
fusion and hands it out of none. On vtpu 265 (linen_whole, FSDP) the last block's output
`x + (h @ w2 + b2)`, sliced from the FSDP matmul's output window, is nested in the LM head's
forward matmul; the recompute nests its copy in the head's weight gradient, and the program
without remat, its value read by both head matmuls, nests a copy of its own there (add 2,048 of
the recompute's are that program's). It could as well have stored the value, which this program
does not show: a hinge of one as above. Here no value number meets (the recompute recomputes the
matmul the copy slices), so the forward copy is an op outside every checkpoint of the same opcode,
shape and frame inputs (hloflops.remat.inputs) in a nested operand fusion of a forward matmul,
with no such op unfused or handed out of a fusion called outside a fusion; the copy may slice its
input; and the matmul reading it is a gradient's, not the recompute's own (that reader the
program without remat never runs). On TPU draws 0-419 it fires on vtpu 265 alone."""

from __future__ import annotations

from typing import Mapping

from hloflops.remat.inputs import FrameInputs
from hloflops.remat.names import REMAT_SCOPE
from hloflops.remat.op_kinds import DUPLICATED, EXPENSIVE, MATMUL_OPCODES, shape_key
from hloflops.remat.sites import SiteKey, SiteOp
from hloflops.scopes import phase
from hloparse.ir import CallRole, Computation, Instruction, Module

_VIEWS = frozenset({"bitcast", "copy", "reshape", "transpose"})
# What a nested copy of a cheap activation may hold besides its cheap ops: nothing that computes
# (a narrowing or widening convert is the matmul operand's own cast).
_FREE = frozenset({"parameter", "constant", "broadcast", "convert", "iota"}) | _VIEWS
_CHEAP = DUPLICATED - EXPENSIVE
# A copy of a value the forward never stores may also slice its input (a windowed matmul's output
# window): XLA fused the producer into every reader, the slice with it.
_SLICES = frozenset({"slice", "dynamic-slice"})


def gradient_operand_copies(module: Module, ops: list[SiteOp], remat: set[SiteKey],
                            fused: Mapping[str, frozenset[str]]) -> dict[SiteKey, int]:
    """Counted op of a nested copy -> 1: the program without remat may run it once more, in its
    own copy of the activation in the same gradient fusion (module docstring). `fused` is each
    fused computation's outputs (hloflops.remat.fusion_copies.fused_outputs)."""
    by_site: dict[str, list[SiteOp]] = {}
    for op in ops:
        by_site.setdefault(op.key[0], []).append(op)
    stored = _stored_forward_values(ops, fused)
    unstored: set[tuple] | None = None  # worked out on the first copy that needs it
    inputs = FrameInputs(module)
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
                if not members or comp_nested is None or not _cheap_only(comp_nested, _SLICES):
                    continue
                paired = [op for op in members
                          if op.key in remat and REMAT_SCOPE in op.op_name and op.exact in stored]
                if not paired or not _cheap_only(comp_nested) or not may_duplicate(comp_nested, paired):
                    # Else a copy of a value the forward never stores (XLA fused its producer
                    # into every reader): the twin's gradient may nest its own copy too.
                    if unstored is None:
                        unstored = _unstored_forward_copies(module, ops, fused, inputs)
                    # and read by a gradient matmul: a recomputed matmul's reader is the recompute's.
                    if REMAT_SCOPE in _matmul_name(body) or not any(
                            op.key in remat and REMAT_SCOPE in op.op_name and op.inst.opcode in _CHEAP
                            and _alike(op, inputs) in unstored for op in members):
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
    return operand_fusions(body, root)


def operand_fusions(comp: Computation, inst: Instruction) -> list[str]:
    """The fused computations of the fusions that feed, through views, an operand of `inst`."""
    out: list[str] = []
    for name in inst.operands:
        operand = comp.by_name.get(name)
        while operand is not None and operand.opcode in _VIEWS:
            operand = comp.by_name.get(operand.operands[0])
        if operand is not None and operand.opcode == "fusion":
            out += operand.called(CallRole.FUSION)
    return out


def _matmul_name(body: Computation) -> str:
    """The op_name of the matmul at the body's root (through views)."""
    root: Instruction | None = body.root
    while root is not None and root.opcode in _VIEWS:
        root = body.by_name.get(root.operands[0])
    return root.op_name if root is not None else ""


def may_duplicate(comp: Computation, paired: list[SiteOp]) -> bool:
    """Would XLA's instruction fusion duplicate the activation into a consumer regardless of its
    other consumers? `InstructionFusion::ComputeGloballyUnfusible` lets it where the producer's
    operands weigh no more than its output (duplicating it adds no memory traffic): the copy's
    inputs (the nested fusion's parameters) against the widest paired value it computes. A layer
    norm's `(x - mean) * r` reads more than it writes and is left out."""
    inputs = sum(inst.shape.byte_size() for inst in comp.instructions if inst.opcode == "parameter")
    return inputs <= max(op.inst.shape.byte_size() for op in paired)


def _cheap_only(comp: Computation, more: frozenset[str] = frozenset()) -> bool:
    """Only cheap elementwise ops, views, constants and converts (what XLA may copy into a
    consumer), and the opcodes `more` names."""
    return all(inst.opcode in _CHEAP or inst.opcode in _FREE or inst.opcode in more
               for inst in comp.instructions)


def _unstored_forward_copies(module: Module, ops: list[SiteOp], fused: Mapping[str, frozenset[str]],
                             inputs: FrameInputs) -> set[tuple]:
    """The cheap forward values (outside every checkpoint; by opcode, shape and frame inputs,
    hloflops.remat.inputs: a recompute that also recomputes the matmul feeding them meets them by
    no value number) that a forward matmul's fusion computes in a nested operand fusion and that
    no forward op hands out stored: no unfused op computes them and no fusion called from outside
    a fusion outputs them. XLA fused their producer into every reader."""
    top: set[str] = set()  # fused computations called by a fusion outside every fusion
    fused_names = set(fused)
    for comp, inst in module.instructions():
        if inst.opcode == "fusion" and comp.name not in fused_names:
            top.update(inst.called(CallRole.FUSION))
    nested: set[str] = set()
    for comp, inst in module.instructions():
        if inst.opcode == "fusion" and phase(inst.op_name) == "forward" and comp.name not in fused_names:
            for callee in inst.called(CallRole.FUSION):
                body = module.by_name.get(callee)
                if body is not None and body.root is not None:
                    nested.update(matmul_operand_fusions(body))
    found: set[tuple] = set()
    kept: set[tuple] = set()
    for op in ops:
        if phase(op.op_name) != "forward" or not outside_checkpoints(op.op_name) or op.inst.opcode not in _CHEAP:
            continue
        if op.key[0] in nested:
            found.add(_alike(op, inputs))
        elif op.key[0] not in fused_names or (op.key[0] in top and op.inst.name in fused.get(op.key[0], ())):
            kept.add(_alike(op, inputs))
    return found - kept


def _alike(op: SiteOp, inputs: FrameInputs) -> tuple:
    return op.inst.opcode, shape_key(op.inst.shape), inputs.of(*op.key[:2])
