"""Residuals a scan's backward loop recomputes wide inside its gradient fusion, which the program
without remat stores in a bf16 stack (after optimization, TPU; hloflops.remat.pairing calls
`wide_residual_trips` after TPU's rules).

TPU computes a bf16 program's elementwise chains in f32 (float normalization: an unnamed convert
widens each bf16 input, constant and matmul output in the fusion). In a scan's backward loop body
TPU fuses the recompute of a block's cheap chain (gelu's `x = h + b`, `tanh(...)`, `1 - t`,
`0.5 * (1 + t)`, `3 * x * x`) into the gradient fusion that reads it, wide: the gradient's ops read
the recomputed values in f32, and nothing narrows them. The program without remat computes that
chain in its forward loop and stores each value the linearization reads (a residual: every value a
gradient op reads of the recompute) into a stack of its jax type, bf16: it narrows the value once
per trip in its forward, and each backward fusion reading it widens the slice it reads once per
trip. Neither convert runs in this program (TPU draw 29, linen_remat_scan under tensor parallelism:
five gelu residuals read in one gradient fusion, five narrowing and five widening converts of the
program without remat, [8, 4, 128] each, two trips; its convert truth -23,776 against +90,112
counted). So the remat FLOPs of convert may be lower than any split of this program's ops shows,
by two slice-sized converts per residual and trip: a `twin_copies` hinge (the range's low end
only), carried by a counted convert of the residual's size in the same fusion. What else the
program without remat's saving fusions copy (the chain's own widens, hloflops.remat.twin_saves)
rests on its fusion; the counted recompute widens are hinges already (saved_chain_widens).

A residual: a remat-named f32 op computing on the values of a chain that float normalization
widened in this fusion (an unnamed convert from bf16 on its operand tree, through f32 elementwise
ops), read directly by an elementwise op of the backward not named in the recompute, of the same
shape. A value jax itself computes in f32 (a named `convert_element_type` upcast, flax's layer norm
statistics) is stored in f32 by the program without remat: no round trip, and not found here
(its widen is named). An f32 program has no such widen at all. Not a value this program narrows
too in the backward loop (the recompute hands it out narrowed for a weight's gradient, as the
forward narrows it for its own matmul: the stack's narrow has its counterpart here; gelu's `x`
on draw 29, tanh's `t` on TPU draw 37), nor `c - t` of a widened constant and such a value,
whose two converts hloflops.remat.saved_residual_narrows settles, sure (draw 37 keeps its exact
count and its range)."""

from __future__ import annotations

from hloflops.cost.tpu import is_tpu_module
from hloflops.remat.fusion_copies import backward_loop_bodies
from hloflops.remat.names import REMAT_SCOPE
from hloflops.remat.op_kinds import ELEMENTWISE
from hloflops.remat.sites import SiteKey, SiteOp
from hloflops.scopes import phase
from hloparse.ir import Computation, Instruction, Module

# How deep an operand tree is followed to find float normalization's widen (a gelu chain is ~8).
_DEPTH = 12
_VIEWS = frozenset({"bitcast", "reshape", "broadcast", "copy", "transpose"})


def wide_residual_trips(module: Module, ops: list[SiteOp], remat: set[SiteKey],
                        twin_copies: dict[SiteKey, int]) -> None:
    """Adds to `twin_copies`, on a counted convert of each gradient fusion reading residuals
    recomputed wide, two per residual (its narrow in the twin's forward, its widen here): the
    round trips of the program without remat's bf16 stacks (module docstring)."""
    if not module.is_scheduled or not is_tpu_module(module):
        return
    backward_loops = backward_loop_bodies(module, ops)
    if not backward_loops:
        return
    by_key = {op.key: op for op in ops}
    narrowed = _narrowed_values(module, ops, backward_loops)
    residuals: dict[tuple[str, int], set[str]] = {}  # (fused computation, site) -> residual names
    for op in ops:
        if op.frame not in backward_loops or op.marked or not op.op_name or REMAT_SCOPE in op.op_name \
                or phase(op.op_name) != "backward" or op.inst.opcode not in ELEMENTWISE:
            continue
        comp = module.by_name[op.key[0]]
        if comp.is_entry or not comp.is_fusion_body:
            continue
        for name in op.inst.operands:
            source = by_key.get((op.key[0], name, op.key[2]))
            if source is not None and _wide_recompute(comp, source, op.inst) \
                    and not _stored_here_too(comp, source, narrowed, by_key):
                residuals.setdefault((op.key[0], op.key[2]), set()).add(name)
    for (callee, site), names in residuals.items():
        comp = module.by_name[callee]
        size = {_elements(comp.by_name[name]) for name in names}
        converts = sorted((op for op in ops if op.key[0] == callee and op.key[2] == site
                           and op.inst.opcode == "convert" and _elements(op.inst) in size),
                          key=lambda op: op.order)
        # A counted convert carries the hinge, else the narrow of the gradient the fusion hands out
        # (no hinge of its own: a convert that may be remat must keep its own place in the range).
        carriers = [op for op in converts if op.key in remat] or \
            [op for op in converts if not op.marked and _narrows_gradient(comp, op.inst, by_key, op.key)]
        if not carriers or len(size) != 1:
            continue  # residuals of several sizes, or no convert to carry them: left as they are
        key = carriers[0].key
        twin_copies[key] = twin_copies.get(key, 0) + 2 * len(names)


def _narrowed_values(module: Module, ops: list[SiteOp], backward_loops: set[str]) -> set:
    """The values of the recompute that a backward loop narrows somewhere (handed out for a
    weight's gradient matmul, which reads bf16)."""
    out = set()
    for op in ops:
        if op.frame in backward_loops and op.marked and str(op.inst.shape.element_type) == "f32":
            comp = module.by_name[op.key[0]]
            if any(user.opcode == "convert" and str(user.shape.element_type) == "bf16"
                   for user in comp.users.get(op.inst.name, ())):
                out.add(op.exact)
    return out


def _stored_here_too(comp: Computation, source: SiteOp, narrowed: set, by_key: dict[SiteKey, SiteOp]) -> bool:
    """Does this program narrow the residual too (the program without remat's narrow into its stack
    then has its counterpart here: the forward narrows the same value for its own matmul, or the
    recompute hands it out narrowed), or is it `c - t` of a widened constant and such a value
    (hloflops.remat.saved_residual_narrows settles those two converts, sure)?"""
    if source.exact in narrowed:
        return True
    if source.inst.opcode not in ("add", "subtract"):
        return False
    operands = [by_key.get((source.key[0], name, source.key[2])) for name in source.inst.operands]
    return any(op is not None and op.exact in narrowed for op in operands) and \
        any(_widened_constant(comp, name) for name in source.inst.operands)


def _widened_constant(comp: Computation, name: str) -> bool:
    inst = comp.by_name.get(name)
    if inst is None or inst.opcode != "convert" or not inst.operands:
        return False
    inst = comp.by_name.get(inst.operands[0])
    while inst is not None and inst.opcode in _VIEWS and inst.operands:
        inst = comp.by_name.get(inst.operands[0])
    return inst is not None and inst.opcode == "constant"


def _wide_recompute(comp: Computation, source: SiteOp, reader: Instruction) -> bool:
    """Is the operand a remat-named f32 elementwise op of the reader's shape computed from values
    float normalization widened (an unnamed convert from bf16 under it)?"""
    inst = source.inst
    if not source.named or REMAT_SCOPE not in source.op_name or inst.opcode not in ELEMENTWISE \
            or inst.opcode == "convert" or str(inst.shape.element_type) != "f32" \
            or inst.shape.dims != reader.shape.dims:
        return False
    return _normalized(comp, inst, _DEPTH)


def _normalized(comp: Computation, inst: Instruction, depth: int) -> bool:
    """Is there an unnamed widen from bf16 on the f32 elementwise operand tree of the op?"""
    if depth <= 0:
        return False
    for name in inst.operands:
        operand = comp.by_name.get(name)
        if operand is None:
            continue
        if operand.opcode == "convert" and not operand.op_name:
            source = comp.by_name.get(operand.operands[0]) if operand.operands else None
            if source is not None and str(source.shape.element_type) == "bf16" \
                    and str(operand.shape.element_type) == "f32":
                return True
        elif (operand.opcode in ELEMENTWISE or operand.opcode in _VIEWS) and operand.opcode != "convert" \
                and str(operand.shape.element_type) == "f32" and _normalized(comp, operand, depth - 1):
            return True
    return False


def _narrows_gradient(comp: Computation, inst: Instruction, by_key: dict[SiteKey, SiteOp], key: SiteKey) -> bool:
    """Is the convert a narrowing of an op of the backward not named in the recompute?"""
    source = by_key.get((key[0], inst.operands[0], key[2])) if inst.operands else None
    return source is not None and not source.marked and bool(source.op_name) \
        and REMAT_SCOPE not in source.op_name and phase(source.op_name) == "backward" \
        and str(source.inst.shape.element_type) == "f32" and str(inst.shape.element_type) == "bf16"


def _elements(inst: Instruction) -> int:
    n = 1
    for d in inst.shape.dims:
        n *= d
    return n
