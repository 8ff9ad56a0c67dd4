"""jax's marker on a residual that a checkpoint policy saves (`dots_saveable`,
`save_only_these_names`, ...): a reduce-precision that rounds nothing, put there to keep XLA from
moving the saved value into the backward pass. It runs because of remat (the program without
remat has none), though it recomputes nothing: remat FLOPs by the definition (the difference to
that program). Only looked for in a module with remat markers (`find_remat` returns earlier in
one without)."""

from __future__ import annotations

from typing import Iterable

from hloparse.ir import Instruction, Module
from hloflops.remat.op_kinds import DUPLICATED, EXPENSIVE, OWN_BITS, is_identity_rounding, rounding_bits
from hloflops.remat.sites import SiteKey, SiteOp


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


def copied_into_saves(module: Module, ops: list[SiteOp], remat: set[SiteKey]) -> set[SiteKey]:
    """Forward ops XLA copied into the fusion that stores a policy's saved residual into a loop's
    stack (a fusion of a loop body holding a dynamic-update-slice and the residual's identity
    rounding): the cheap unmarked ops under the rounding whose value the forward computes in
    another fusion too. The program with remat makes that copy because the policy saves this value;
    the program without remat saves the linearization's residuals, this value only where its
    backward reads it itself (gelu's `h`, not tanh's: base seed 110, `tanh(x @ w + b)` under
    `save_only_these_names`, the bias add copied into the saving fusion, +40,960 add). Whether it
    does is its fusion's business: unsure, not counted."""
    entry = module.entry.name
    comps = {}
    values: dict[object, set[tuple[str, int]]] = {}
    for op in ops:
        values.setdefault(op.exact, set()).add((op.key[0], op.key[2]))
        if op.frame != entry and op.frame != op.key[0]:
            comps.setdefault((op.key[0], op.key[2]), []).append(op)
    found: set[SiteKey] = set()
    for (comp_name, site), members in comps.items():
        comp = module.by_name[comp_name]
        roundings = [i for i in comp.instructions if is_identity_rounding(i)]
        if not roundings or not any(i.opcode == "dynamic-update-slice" for i in comp.instructions):
            continue
        under: set[str] = set()
        pending = [o for r in roundings for o in r.operands]
        while pending:
            name = pending.pop()
            if name in under or name not in comp.by_name:
                continue
            under.add(name)
            pending += comp.by_name[name].operands
        found |= {op.key for op in members if op.inst.name in under and not op.marked and op.key not in remat
                  and op.inst.opcode in DUPLICATED and op.inst.opcode not in EXPENSIVE
                  and len(values[op.exact]) > 1}
    return found
