"""The narrow a windowed convolution's operand takes in the convolution's own fusion (after
optimization, TPU only).

A weight gradient's fusion recomputes a cheap activation of a stored value nested before its
convolution (relu's `max(x, 0)`) and narrows it to the convolution's input type there. The narrow
belongs to the convolution's operand: the program without remat narrows the same activation for
the same convolution, in the same place, whatever it stored (tpu seed 32: the twin stores the f32
pre-activation and narrows its relu inside the gradient's fusion; this program stores it bf16,
widens, takes relu and narrows). So the narrow is remat exactly when the op it narrows is, and a
stand-in where it is one (in the range with it); what differs (here the widen of the bf16 store)
is left to the other rules. Likewise the narrow of a counted op the pairing leaves a range hinge
(paired by signature only, or its count resting on fusion: `weak`, `loose`) is a hinge with it
(`weak_operand_narrows`, after every rule has settled the op): vtpu 245, a nested checkpoint's
inner recompute of relu narrowed for three weight gradients, the relus hinges and their narrows
sure, the low end 15,392 above the truth (the twin narrows its own relu copies for them).

Only a convolution of the source program (`conv_general_dilated`, with a window wider than one
tap: TPU writes attention's and other matmuls as convolutions too, some with windows), and only a
narrowing convert (fewer bits out than in) read by the convolution alone, through views,
inside the fusion holding it, of an op that has FLOPs of its own.
"""

from __future__ import annotations

import re

from hloflops.cost.tpu import is_tpu_module
from hloflops.remat.packed_conv_inputs import is_spatial_convolution
from hloflops.remat.sites import SiteKey, SiteOp, value_readers
from hloparse.ir import CallRole, Computation, Instruction, Module

_VIEWS = frozenset({"bitcast", "reshape", "copy"})


def conv_operand_narrows(module: Module, ops: list[SiteOp], decided) -> None:
    """Give each such narrow its operand's flag, settled (`decided`: by_platform's `Decided`)."""
    if not is_tpu_module(module):
        return
    by_inst: dict[tuple[str, str], SiteOp] = {op.key[:2]: op for op in ops}
    readers = value_readers(module)
    counted: set[SiteKey] = set()
    model: set[SiteKey] = set()
    hinged: set[SiteKey] = set()
    for comp, inst in module.instructions():
        if not is_spatial_convolution(inst):
            continue
        for operand in inst.operands:
            found = _narrow_before(module, comp, operand, readers)
            if found is None:
                continue
            body, narrow = found
            op, source = by_inst.get((body.name, narrow.name)), by_inst.get((body.name, narrow.operands[0]))
            if op is None or source is None:
                continue
            (counted if source.key in decided.remat else model).add(op.key)
            if source.key in decided.stand_ins:
                hinged.add(op.key)  # a stand-in's narrow: in the range with it (hloflops.remat.unseen_masks)
    decided.remat = (decided.remat | counted) - model
    decided.certain |= counted | model
    decided.stand_ins = decided.stand_ins | hinged


def weak_operand_narrows(module: Module, ops: list[SiteOp], weak: set[SiteKey]) -> set[SiteKey]:
    """The narrows of a convolution's operand (as `conv_operand_narrows` finds them) whose operand
    is in `weak` (a counted range hinge): as unsure as it."""
    if not is_tpu_module(module) or not weak:
        return set()
    by_inst: dict[tuple[str, str], SiteOp] = {op.key[:2]: op for op in ops}
    readers = value_readers(module)
    found: set[SiteKey] = set()
    for comp, inst in module.instructions():
        if not is_spatial_convolution(inst):
            continue
        for operand in inst.operands:
            narrowed = _narrow_before(module, comp, operand, readers)
            if narrowed is None:
                continue
            body, narrow = narrowed
            op, source = by_inst.get((body.name, narrow.name)), by_inst.get((body.name, narrow.operands[0]))
            if op is not None and source is not None and source.key in weak:
                found.add(op.key)
    return found


def _narrow_before(module: Module, comp: Computation, name: str, readers: dict,
                   nested: bool = True) -> tuple[Computation, Instruction] | None:
    """The narrowing convert an operand is, through views each read only on this path, or the
    root of a loop fusion nested there (its computation with it)."""
    inst = comp.by_name.get(name)
    while inst is not None and inst.opcode in _VIEWS and inst.operands:
        if len(readers.get((comp.name, inst.name), [])) != (0 if inst.is_root else 1):
            return None
        inst = comp.by_name.get(inst.operands[0])
    if inst is None or len(readers.get((comp.name, inst.name), [])) != (0 if inst.is_root else 1):
        return None
    if nested and inst.opcode == "fusion" and inst.attributes.get("kind") == "kLoop":
        names = inst.called(CallRole.FUSION)
        body = module.by_name.get(names[0]) if len(names) == 1 else None
        root = next((i for i in body.instructions if i.is_root), None) if body is not None else None
        return _narrow_before(module, body, root.name, readers, nested=False) if root is not None else None
    if inst.opcode != "convert":
        return None
    source = comp.by_name.get(inst.operands[0])
    if source is None or _bits(inst.shape.element_type) >= _bits(source.shape.element_type):
        return None
    return comp, inst


def _bits(element_type: str) -> int:
    digits = re.findall(r"\d+", element_type)
    return int(digits[0]) if digits else 0
