"""The converts XLA's float normalization adds around a bfloat16 op that the backend computes in f32
(CPU): each operand widened to f32 once per fusion that reads it (`convert(p)` of a fusion
parameter), each result narrowed back to bfloat16 (`convert(convert(y, bf16), f32)` between two
ops of one fusion). They carry no op_name of their own, and how many there are follows the
fusions, not the values: a forward whose chain XLA fused into one fusion widens its input once,
the same chain split into three fusions (as the recompute is, or the program without remat's
forward, whose backward reads the intermediates) widens it three times.

A narrowing convert rounds one op's result, once per copy of the op, and follows that op's answer,
also where XLA names it after a nested checkpoint's barrier (`recompute_barrier_roundings`). But
the narrowing of a value computed outside the fusion (a library fusion's matmul, whose f32 output
XLA rounds in each loop fusion reading it) is copied per reading fusion as a widen is, and follows
the widen of its result (hloflops.remat.widen_counts). A widening one runs once per value and per
fusion reading it. So inside a fusion that computes a
recompute, a widen that no rule counted (of a forward value the fusion reads) may still run
because of remat: the program without remat widens that value in as many fusions as its own
forward splits the chain into, which this program does not show (base draw 20, a gelu MLP
recomputed under `dots_saveable`: the forward fused gelu into one fusion widening the saved
pre-activation once, the recompute's three fusions widen it three times, the program without
remat's forward three times as well: one widen per layer runs because of remat, though no op of
the recompute computes anything new). Where the forward's widens of the value are in sight,
hloflops.remat.widen_counts counts the recompute's as many; those it leaves, and the widens of a
value whose forward is not in sight, are model FLOPs, unsure: the range's high end holds them
(`RematIndex.unsure`).

A fusion that only widens a value (`widens_only`: XLA's lone widen in front of a library fusion's
conv, which reads f32) widens it for its readers alone; where they are all recomputes (held-out
more 186, a nested remat's recompute of a block's first conv, whose forward widened the block's
input inside its own library fusion of the whole block), it is one of the recompute's widens of
the value, counted by hloflops.remat.widen_counts after those in fusions computing the recompute
(which of equal widens is counted changes no count, and keeps a range as it was)."""

from __future__ import annotations

from typing import Iterable

from hloflops.remat.fusion_copies import fused_outputs
from hloflops.remat.sites import SiteKey, SiteOp
from hloparse.ir import Computation, Instruction, Module

# The float types float normalization widens to f32 for an op computed in f32.
NARROW_FLOATS = frozenset({"bf16", "f16"})
# Ops that hand a value on unchanged, in its layout.
_VIEWS = frozenset({"bitcast", "reshape"})


def is_normalization_widen(inst: Instruction, operand: Instruction | None) -> bool:
    """A convert without an op_name from bfloat16 or f16 to f32. (The narrowing convert after an op
    rounds that op's result, one per copy of the op: it follows the op's own answer.)"""
    return inst.opcode == "convert" and operand is not None and not inst.op_name and \
        inst.shape.element_type == "f32" and operand.shape.element_type in NARROW_FLOATS


def unsure_normalization_widens(module: Module, ops: Iterable[SiteOp], remat: set[SiteKey]) -> set[SiteKey]:
    """The normalization widens (`is_normalization_widen`) not counted as remat inside a
    fusion one of whose outputs is (at that call site): model FLOPs on how XLA fused the program
    without remat's forward, which may widen the same value in more fusions or fewer."""
    fused = fused_outputs(module)
    if not fused:
        return set()
    ops = [op for op in ops if op.key[0] in fused]
    computes_recompute = {(op.key[0], op.key[2]) for op in ops
                          if op.key in remat and op.inst.name in fused[op.key[0]]}
    found: set[SiteKey] = set()
    for op in ops:
        if op.key in remat or (op.key[0], op.key[2]) not in computes_recompute or not op.inst.operands:
            continue
        operand = module.by_name[op.key[0]].by_name.get(op.inst.operands[0])
        if is_normalization_widen(op.inst, operand):
            found.add(op.key)
    return found



def widens_only(comp: Computation) -> bool:
    """Does the fused computation only widen what it reads (normalization widens, and views)? XLA
    wraps a widen alone in a fusion of its own where the value's readers are not elementwise (a
    library fusion's conv): one per group of readers it widens for."""
    widens = False
    for inst in comp.instructions:
        if inst.opcode in _VIEWS or inst.opcode == "parameter":
            continue
        if not is_normalization_widen(inst, comp.by_name.get(inst.operands[0]) if inst.operands else None):
            return False
        widens = True
    return widens


def recompute_barrier_roundings(module: Module, ops: Iterable[SiteOp], remat: set[SiteKey]) -> set[SiteKey]:
    """The narrowings named by the checkpoint primitive (`.../remat2`) that round a recompute of
    their own fusion: a nested checkpoint's barrier pins the declared bf16 type of the value the
    outer recompute hands to the inner checkpoint, and XLA names the recompute's rounding of it
    after the barrier. It is still that op's rounding, run once per copy of the op, and follows
    its answer like an unnamed one (held-out base seed 217: block 2's residual sum, rounded by the
    forward and by the outer recompute, once in the program without remat)."""
    found: set[SiteKey] = set()
    for op in ops:
        inst = op.inst
        if inst.opcode != "convert" or op.key in remat or not inst.operands \
                or op.op_name.rsplit("/", 1)[-1] != "remat2" or inst.shape.element_type not in NARROW_FLOATS:
            continue
        rounded = module.by_name[op.key[0]].by_name.get(inst.operands[0])
        if rounded is not None and rounded.shape.element_type == "f32" and rounded.opcode != "parameter" \
                and (op.key[0], rounded.name, op.key[2]) in remat:
            found.add(op.key)
    return found
