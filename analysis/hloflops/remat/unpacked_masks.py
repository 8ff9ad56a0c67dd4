"""The compare behind a mask TPU packed into bits between two fusions (after optimization).

Where one fusion hands a `pred` value to others through memory, TPU may store it a bit per
element: the computing fusion converts it to integers, shifts each by its index along one
dimension (`shift-left` by an `iota`) and ORs that dimension away in a reduce; each reading fusion
ANDs a broadcast of the packed word with a shifted one and converts back to `pred`
(hloflops.remat.packed_masks counts that packing). A rule that asks which recomputed value a
backward op reads finds the unpacking convert, which carries jax's name for the compare; the value
is the compare the packing fusion computes."""

from __future__ import annotations

from typing import Mapping

from hloflops.remat.sites import SiteKey, SiteOp, source_value
from hloparse.ir import Module

# Ops that hand a value on unchanged.
VIEWS = frozenset({"bitcast", "reshape", "copy", "transpose"})


def packed_compare(module: Module, callers: Mapping, by_key: Mapping[SiteKey, SiteOp], op: SiteOp) -> SiteOp | None:
    """The compare whose mask an unpacking convert reads back, where TPU packed it into bits to hand
    it from one fusion to another (relu's `x > 0` of a recomputed convolution, held-out TPU 109: the
    recompute's fusion converts the mask to integers, shifts each by its row's index (iota) and
    ORs them in a reduce; the reading fusion ANDs a broadcast of the packed word with a shifted one
    and converts to pred, an op jax's name for the compare is lent to). The program without remat
    saves the mask in its forward as jax computes it, so the compare, not the unpacking, is the
    residual on whose chain the recompute lies (hloflops.remat.backward_loop_copies). None for any other op."""
    comp = module.by_name[op.key[0]]
    if op.inst.opcode != "convert" or op.inst.shape.element_type != "pred" or not op.inst.operands:
        return None
    bits = comp.by_name.get(op.inst.operands[0])
    if bits is None or bits.opcode != "and" or len(bits.operands) != 2:
        return None
    sides = [_unwidened(comp, name) for name in bits.operands]
    words = [inst for inst in sides if inst is not None and inst.opcode == "broadcast" and inst.operands]
    if len(words) != 1 or not any(inst is not None and inst.opcode == "shift-left" for inst in sides):
        return None
    # The packed word back to the reduce that ORed it, across the fusions' boundaries.
    found = source_value(module, callers, comp, words[0].operands[0], lambda i: i.opcode in VIEWS, 16)
    if found is None:
        return None
    comp, inst = found
    if inst.opcode != "reduce" or not inst.operands:
        return None
    inner = comp.by_name.get(inst.operands[0])
    while inner is not None and inner.opcode == "convert" and inner.operands:  # a narrower word
        inner = comp.by_name.get(inner.operands[0])
    if inner is None or inner.opcode != "shift-left":
        return None
    for name in inner.operands:
        widen = comp.by_name.get(name)
        if widen is not None and widen.opcode == "convert" and widen.operands:
            mask = comp.by_name.get(widen.operands[0])
            if mask is not None and mask.shape.element_type == "pred":
                return by_key.get((comp.name, mask.name, op.key[2]))
    return None


def _unwidened(comp, name: str):
    """The op a value is widened from (a packed u8 or u16 word widened to u32 for the `and`)."""
    inst = comp.by_name.get(name)
    while inst is not None and inst.opcode == "convert" and inst.operands:
        inst = comp.by_name.get(inst.operands[0])
    return inst
