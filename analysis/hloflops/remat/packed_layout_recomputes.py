"""A recompute of a cheap op the forward computes on TPU's packed layout of a convolution's output
(after optimization, TPU only).

Where TPU packs a 3x3 convolution (window 3x3, `pad=1_1x0_0`: hloflops.remat.packed_conv_inputs),
the convolution writes its output packed, `[H, f, w+1, C]` (f rows of w columns and a halo column,
N W = f w), and the forward fusions reading it compute their elementwise ops there: relu's
`max(x, 0)` of a conv layer runs on `[32, 32, 5, 256]` for an activation of `[4, 32, 32, 256]`
(utpu 187). A policy that saves the pre-activation stacks it in the natural layout `[N, H, W, C]`,
so the backward's recompute of relu from that stack runs there. The value numbering cannot pair
the two (other inputs, other shapes), and by signature the forward computes nothing of the
recompute's result shape, so hloflops.remat.by_signature's `linearization_only` takes the
recompute for the linearization's own work, sure model FLOPs.

It need not be. The program without remat either saves relu's output (its weight gradient reads it
stored, the recompute is remat: utpu 187, maximum +3,145,728 and the narrow for the gradient's
convolution alike) or saves the pre-activation and copies relu into the gradient's fusion as this
program does (the case hloflops.remat.gradient_operand_copies names, ntpu 159). This program looks
the same either way, so the op is a stand-in: model FLOPs in the report, remat at the range's high
end (its narrow for the convolution follows it there: hloflops.remat.conv_operand_narrows).

The sign is the shape: a forward op of the same opcode, element type and name inside the
checkpoint whose result is the packed layout of this one's, `[H, f, w+1, C]` against
`[N, H, W, C]` with `f w = N W` (unit dimensions aside), and no forward op of this one's own
shape and name (the case `linearization_only` rests on). Only an op no rule counted remat.
Of TPU draws 0-239 the sign shows on utpu 187 alone (relu recomputed from a saved pre-activation
of a packed layer is rare among the drawn forms); on no other draw does any bound move.
"""

from __future__ import annotations

from hloflops.cost.tpu import is_tpu_module
from hloflops.remat.names import ends_with, inner_tail
from hloflops.remat.op_kinds import MATMUL_OPCODES
from hloflops.remat.sites import SiteKey, SiteOp
from hloflops.scopes import phase
from hloparse.ir import Module, Shape


def packed_layout_recomputes(module: Module, ops: list[SiteOp], decided) -> None:
    """Make each remat-named op the forward computes only on a convolution's packed layout a
    stand-in (`decided`: hloflops.remat.by_platform's `Decided`)."""
    if not is_tpu_module(module):
        return
    forward: dict[tuple[str, str], list[tuple[tuple[int, ...], str]]] = {}
    for op in ops:
        if op.marked or not op.op_name or op.inst.shape.is_tuple or phase(op.op_name) == "backward":
            continue
        forward.setdefault((op.inst.opcode, op.inst.shape.element_type), []).append(
            (_dims(op.inst.shape), op.op_name))
    found: set[SiteKey] = set()
    for op in ops:
        if not op.named or op.inherited or not op.op_name or op.inst.shape.is_tuple \
                or op.inst.opcode in MATMUL_OPCODES or op.key in decided.remat or op.key in decided.stand_ins:
            continue
        tail = inner_tail(op.op_name)
        if not tail:
            continue
        dims = _dims(op.inst.shape)
        candidates = [shape for shape, name in forward.get((op.inst.opcode, op.inst.shape.element_type), ())
                      if ends_with(name, tail)]
        if dims in candidates:  # the forward computes it in this layout: the other rules' case
            continue
        if any(_packed_of(shape, dims) for shape in candidates):
            found.add(op.key)
    decided.stand_ins = decided.stand_ins | found


def _dims(shape: Shape) -> tuple[int, ...]:
    return tuple(d for d in shape.dims if d != 1)


def _packed_of(packed: tuple[int, ...], natural: tuple[int, ...]) -> bool:
    """Is `packed` `[H, f, w+1, C]` of `natural` `[N, H, W, C]`, `f w = N W` (a halo column per row)?"""
    if len(packed) != 4 or len(natural) != 4 or packed[2] < 2:
        return False
    n, h, w, c = natural
    return packed[0] == h and packed[3] == c and packed[1] * (packed[2] - 1) == n * w
