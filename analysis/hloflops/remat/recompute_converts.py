"""Float normalization's converts in fusions that serve the recompute alone (after optimization,
CPU).

A recompute fusion that hands its value out only relaid out for the backward's matmuls (XLA's
transpose for a kernel's gradient, `saved_copies.hands_out_relayout`) stands for the relayout
fusion the program without remat builds of its forward's value. That program stores the value
rounded to bfloat16 where its forward computes it, and its relayout reads it stored: it widens it
once. The recompute's relayout computes the value again from what it reads, and every convert of
that chain runs only because of remat: the widens of the values it reads, the roundings (narrow
and widen) of each op's result, and the narrowing of an f32 value it reads (a library fusion's
conv output, rounded there as in the forward's own fusion). All but one widen of the handed-out
value's size: that one is the program without remat's widen of its stored value (more seed 10, a
nested remat's outer recompute of a block's residual sum `x + conv(relu(h)) + b`, transposed for
the next block's kernel gradient: it widens `x` and `b`, rounds the conv output, the bias add and
the sum, seven converts where the program without remat widens the stored sum once). With one
value read (`relu(h)`: widen `h`, round the max) this is one widen of the value read, as
hloflops.remat.widen_counts decides; with several it is more. A checkpoint's name on the sum's
rounding (the barrier of the next block's checkpoint pins its input narrow, `.../remat2`) does
not make the fusion the backward's: its value is the recompute's.

How XLA fused the program without remat is not in sight: the count rests on fusion (`loose`, the
range covers it)."""

from __future__ import annotations

from hloflops.remat.fusion_copies import fused_outputs
from hloflops.remat.normalization import NARROW_FLOATS
from hloflops.remat.op_kinds import LAYOUT_VIEWS
from hloflops.remat.saved_copies import hands_out_relayout
from hloflops.remat.sites import SiteKey, SiteOp
from hloflops.remat.widen_index import WidenIndex
from hloflops.scopes import phase
from hloparse.ir import Computation, Instruction, Module



def relaid_recompute_converts(module: Module, ops: list[SiteOp], remat: set[SiteKey]
                              ) -> tuple[set[SiteKey], set[SiteKey]]:
    """The float normalization converts of each recompute fusion handing its value out only relaid
    out for backward ops: those that run because of remat, and the one widen standing for the
    program without remat's widen of its stored value (see the module's docstring)."""
    fused = fused_outputs(module)
    if not fused:
        return set(), set()
    index = WidenIndex(module, ops, remat, fused)
    members: dict[tuple[str, int], list[SiteOp]] = {}
    for op in ops:
        if op.key[0] in fused:
            members.setdefault((op.key[0], op.key[2]), []).append(op)
    counted: set[SiteKey] = set()
    model: set[SiteKey] = set()
    for (comp_name, site), group in members.items():
        comp = module.by_name[comp_name]
        if not hands_out_relayout(comp):
            continue
        value = _relaid_value(comp)
        by_name = {op.inst.name: op for op in group}
        if value is None or value not in by_name or by_name[value].key not in remat:
            continue
        readers = index.readers(comp_name, site)
        if not readers or not all(not marked and (not name or phase(name) == "backward") for name, marked in readers):
            continue
        converts = [op for op in group if _is_float_convert(comp, op.inst)]
        size = comp.root.shape.num_elements
        stand_in = _stand_in(comp, converts, size)
        if stand_in is None:
            continue
        model.add(stand_in.key)
        counted |= {op.key for op in converts if op is not stand_in}
    return counted, model


def _relaid_value(comp: Computation) -> str | None:
    """The op whose value the relayout hands out: below the root's views and converts."""
    inst: Instruction | None = comp.root
    while inst is not None and (inst.opcode in LAYOUT_VIEWS or inst.opcode == "convert") and inst.operands:
        inst = comp.by_name.get(inst.operands[0])
    return inst.name if inst is not None and inst.opcode != "parameter" else None


def _is_float_convert(comp: Computation, inst: Instruction) -> bool:
    """A convert between f32 and a narrow float (a widen or a rounding's narrowing)."""
    if inst.opcode != "convert" or not inst.operands:
        return False
    operand = comp.by_name.get(inst.operands[0])
    if operand is None:
        return False
    types = {inst.shape.element_type, operand.shape.element_type}
    return "f32" in types and bool(types & NARROW_FLOATS)


def _stand_in(comp: Computation, converts: list[SiteOp], size: int) -> SiteOp | None:
    """The widen standing for the program without remat's widen of its stored value: one of the
    handed-out value's size, of a value read (as hloflops.remat.widen_counts takes it) where there
    is one, else the widen nearest the root."""
    widens = [op for op in converts if op.inst.shape.element_type == "f32" and op.inst.shape.num_elements == size]
    if not widens:
        return None
    for op in widens:
        operand = comp.by_name.get(op.inst.operands[0])
        while operand is not None and operand.opcode in ("bitcast", "copy", "reshape"):
            operand = comp.by_name.get(operand.operands[0])
        if operand is not None and operand.opcode == "parameter":
            return op
    return max(widens, key=lambda op: op.order)
