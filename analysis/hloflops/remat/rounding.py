"""jax's marker on a residual that a checkpoint policy saves (`dots_saveable`,
`save_only_these_names`, ...): a reduce-precision that rounds nothing, put there to keep XLA from
moving the saved value into the backward pass. It runs because of remat (the program without
remat has none), though it recomputes nothing: remat FLOPs by the definition (the difference to
that program). Only looked for in a module with remat markers (`find_remat` returns earlier in
one without)."""

from __future__ import annotations

from typing import Iterable

from hloparse.ir import Instruction, Module
from hloflops.remat.op_kinds import OWN_BITS, rounding_bits
from hloflops.remat.sites import SiteKey


def widened_roundings(module: Module, ops: Iterable[tuple[SiteKey, Instruction]]) -> set[SiteKey]:
    """The marker on a bfloat16 residual after XLA's float normalization (CPU): the value is
    widened to f32 (`convert(convert(x, bf16), f32)`) and rounded to bfloat16's bits, which rounds
    nothing. The rounding and the round trip into f32 that feeds it run only because of the
    marker: remat FLOPs (the program without remat narrows the value to bfloat16 once, the convert
    that follows the rounding; seed 126 of the generator: convert -1,536, reduce-precision -768
    before this rule)."""
    found: set[SiteKey] = set()
    for (comp_name, name, site), inst in ops:
        if inst.opcode != "reduce-precision" or not inst.operands:
            continue
        comp = module.by_name[comp_name]
        widen = comp.by_name.get(inst.operands[0])
        if widen is None or widen.opcode != "convert" or not widen.operands:
            continue
        narrow = comp.by_name.get(widen.operands[0])
        if narrow is None or OWN_BITS.get(narrow.shape.element_type) != rounding_bits(inst):
            continue
        found |= {(comp_name, name, site), (comp_name, widen.name, site)}
        if narrow.opcode == "convert":
            found.add((comp_name, narrow.name, site))
    return found
