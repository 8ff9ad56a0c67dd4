"""A recomputed matmul output's narrow, fused alone with a view into one reader's shape: how many
such narrows the program without remat runs rests on how XLA fused its forward (after
optimization; TPU).

TPU computes a dense layer's product in f32 and narrows it to bf16 for its readers. XLA fuses that
cheap `convert` with the bitcast to each reader's shape, one fusion per shape (`f32[16,64] ->
bf16[16,1,64]` for attention's scores, `-> bf16[16,64,1]` for the backward's gradient matmul), and
copies the narrow into each. The program without remat holds all of those copies in its forward:
the forward's readers' and the backward's, which read its forward's value. With remat the forward
keeps the forward readers' copies and the recompute holds the backward readers' ones: the same
narrows, moved, not run again (TPU wtpu 329, linen_nested fsdp: the twin narrows each decoder key,
query, value, out and MLP output twice, the program with remat once in its forward and once in its
recompute; 16 x 1,024 + 4 x 4,096 counted sure where it runs 4 x 1,024 more in all, the low end
22,528 above the truth). But XLA may as well merge two shapes' copies into one fusion, or CSE may
keep one narrow and bitcast it outside its fusion, and then the recompute's narrow is remat; the
program with remat looks the same either way. The pairing by value counts the recompute's copy as
sure (the forward computes the value once more); here it is loose: counted as before, the range
covering both answers.

Only a remat-marked `convert` f32 -> bf16 paired by value, in a fused computation that holds only
parameters, that one convert and views (bitcast, reshape) and hands the narrow out through a view.
On TPU draws 0-479 such fusions hold recomputes in draws 3, 36, 63, 104, 151, 164, 199, 217, 222,
251, 276, 308, 329, 344, 379, 435, 439, 469, 476, none of them exact (in 164, 222, 308, 329, 344,
379, 439 and 476 the program runs exactly as many of these fusions as its twin; never a sign in a
twin, which has no recompute). The rule lowers the low end of 3, 36, 63, 104, 151, 199, 217, 251,
276, 329, 435 and 469 (the others' narrows were not sure already); the count moves nowhere."""

from __future__ import annotations

from hloflops.remat.sites import SiteKey, SiteOp
from hloparse.ir import Computation, Module

_VIEWS = frozenset({"bitcast", "reshape"})
_WIDE = frozenset({"f32", "f64"})
_NARROW = frozenset({"bf16", "f16"})


def reader_shape_narrows(module: Module, ops: list[SiteOp], remat: set[SiteKey],
                         paired_by_value: set[SiteKey]) -> set[SiteKey]:
    """The recomputed narrows paired by value that this module's docstring leaves to the range."""
    if not module.is_scheduled:
        return set()
    out: set[SiteKey] = set()
    shaped: dict[str, bool] = {}  # fused computation -> whether it is a narrow into a reader's shape
    for op in ops:
        if not (op.marked and op.inst.opcode == "convert" and op.key in remat and op.key in paired_by_value):
            continue
        name = op.key[0]
        if name not in shaped:
            comp = module.by_name.get(name)
            shaped[name] = comp is not None and _narrow_into_a_shape(comp)
        if shaped[name]:
            out.add(op.key)
    return out


def _narrow_into_a_shape(comp: Computation) -> bool:
    """Whether a fused computation holds only parameters, one wide-to-narrow convert and views,
    and hands the convert out through a view."""
    converts = [inst for inst in comp.instructions if inst.opcode == "convert"]
    if len(converts) != 1 or any(inst.opcode not in _VIEWS | {"parameter", "convert"} for inst in comp.instructions):
        return False
    convert = converts[0]
    if convert.shape.element_type not in _NARROW or not convert.operands:
        return False
    source = comp.by_name.get(convert.operands[0])
    if source is None or source.opcode != "parameter" or source.shape.element_type not in _WIDE:
        return False
    root = comp.root
    if root is None or root.opcode not in _VIEWS:
        return False
    while root is not None and root.opcode in _VIEWS:
        root = comp.by_name.get(root.operands[0]) if root.operands else None
    return root is convert
