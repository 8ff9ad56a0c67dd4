"""Float normalization's widens in a scan's backward loop body recompute fusions, on TPU: how many
run because of remat rests on how XLA fused the program without remat (hloflops.remat.by_platform
calls `recompute_widens_hinge` after the pairing counted them against the forward's widens).

TPU's float normalization widens a bf16 value to f32 (an unnamed convert) in each fusion that
computes an f32 op from it. With remat the backward loop's recompute fusions widen the recomputed
values; the pairing counts each such widen beyond the forward's copies of its value as remat, and
sure (`_same_value`'s cap). But the program without remat computes the same residual chains in its
forward loop's saving fusions, to stack them, and copies the widens into those fusions as well
(held-out TPU 82: a layer norm's inputs widened in every fusion stacking `x - mean`, `rsqrt(var)`
and the output; convert +15,728,640, the range's low end above the truth). How many of the
recompute's widens that program makes in its own saving fusions instead is how it fused them, not
an equal value: the widens are in the range only (loose), their count kept as the high end."""

from __future__ import annotations

from hloflops.remat.normalization import is_normalization_widen
from hloflops.remat.sites import SiteKey, SiteOp
from hloparse.ir import Module


def recompute_widens_hinge(module: Module, ops: list[SiteOp], remat: set[SiteKey],
                           backward_loops: set[str]) -> set[SiteKey]:
    """The unnamed bf16 -> f32 widens counted as remat inside fusions of a backward loop body
    that hold a remat-named op (a recompute's fusion): their count rests on the twin's saving
    fusions (see the module's docstring), so they leave the sure count."""
    recompute_fusions = {op.key[0] for op in ops if op.named and op.frame in backward_loops
                         and op.key[0] != op.frame}
    found: set[SiteKey] = set()
    for op in ops:
        if op.key not in remat or op.key[0] not in recompute_fusions or op.inst.opcode != "convert":
            continue
        comp = module.by_name[op.key[0]]
        operand = comp.by_name.get(op.inst.operands[0]) if op.inst.operands else None
        if is_normalization_widen(op.inst, operand):
            found.add(op.key)
    return found
