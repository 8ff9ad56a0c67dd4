"""A forward fusion's widen of its own bf16 matmul output, in a fusion that hands out only a narrowed
activation: a hinge (hloflops.remat.pairing puts `narrowed_forward_widens` in the range's high end).

TPU's float normalization computes a bf16 activation (relu's `max`) in f32: where the fusion's matmul
writes bf16, XLA widens its output (`convert(convolution)`) and narrows the activation back. Whether
the matmul writes bf16 or f32 follows what the program stores of it. A policy saving nothing
(`nothing_saveable`, TPU draws 22, 84, 241: relu, whole model or accumulated gradients) stores only
the next layer's bf16 input, and the recompute rebuilds the pre-activation relu's backward reads; the
program without remat stores that f32 pre-activation, so its convolutions write f32 and run no widen.
This program's sign is the fusion's output: it hands out the narrowed activation alone, never the f32
pre-activation. But whether the twin stores the pre-activation in f32 (no widen) or fuses the same
narrowing as here is not in this program (draws whose twin widens as often: TPU 3, 260), so the
widens are unsure: the reported count keeps them as model FLOPs, the range's high end covers them.
"""

from __future__ import annotations

from hloflops.remat.names import is_remat_named
from hloflops.remat.sites import Key
from hloflops.scopes import phase
from hloparse.ir import CallRole, Module


def narrowed_forward_widens(module: Module) -> set[Key]:
    """(computation, name) of each f32 `convert` of a forward, unmarked bf16 convolution, read by
    relu's `maximum`, in a fused computation whose root is a single bf16 array (no f32 output beside
    it), where a recompute runs a convolution of the same dimensions again (the policy saved none)."""
    fused = {name for _, inst in module.instructions() if inst.opcode == "fusion"
             for name in inst.called(CallRole.FUSION)}
    # the dimensions of the matmuls a recompute runs again: a pre-activation the policy does not save
    recomputed = {inst.shape.dims for _, inst in module.instructions()
                  if inst.opcode == "convolution" and inst.op_name and is_remat_named(inst)}
    found: set[Key] = set()
    for name in fused:
        comp = module.by_name[name]
        root = comp.root
        if root.shape.element_type != "bf16" or not root.shape.is_array:
            continue
        for inst in comp.instructions:
            if inst.opcode != "convert" or inst.shape.element_type != "f32" or len(inst.operands) != 1:
                continue
            conv = comp.by_name[inst.operands[0]]
            # relu's `max` reads it: relu's backward reads the pre-activation, which the twin stores
            relu = any(user.opcode == "maximum" and inst.name in user.operands for user in comp.instructions)
            if relu and conv.opcode == "convolution" and conv.shape.element_type == "bf16" and conv.op_name \
                    and phase(conv.op_name) == "forward" and not is_remat_named(conv) \
                    and conv.shape.dims in recomputed:
                found.add((comp.name, inst.name))
    return found
