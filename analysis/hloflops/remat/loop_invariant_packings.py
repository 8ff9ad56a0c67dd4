"""A recompute's packing of loop-invariant pieces in a scan's backward loop body (after
optimization, TPU only).

An LSTM cell concatenates its gates' weights (`[64, 64]` pieces into `[64, 256]`) for its matmuls,
and TPU writes a concatenation as a packing: each piece padded with `-inf`, widened, combined with
`maximum`, narrowed back (hloflops.remat.packed_conv_inputs' `is_packing`), copied into the fusion
of each matmul reading it. The weights are the same on every trip of the scan over time, and the
program without remat hoists the concatenation out of its loops (XLA's loop-invariant code motion):
it runs once, outside (utpu 229: four packings of one execution each). With a checkpoint around
the cell the backward loop body recomputes the concatenation under the checkpoint's name, and XLA
leaves it there, one packing per matmul reading it (the recompute's and the transpose's: the
transpose reads the recomputed value), each run on every trip (utpu 229: eight packings of 16
executions, half of them counted, convert -5,308,416 short and the truth over the high end), even
though its pieces are the loop's own state passed on unchanged (the narrowed weights). That loop
state is the sign: a value computed from loop-invariant state alone inside the loop is one the
program without remat has no reason to compute there, so every in-loop copy runs because of remat.

Counted remat but not paired by value (as hloflops.remat.packed_masks): the range's low end leaves
them out, since how many copies the program without remat hoists rests on its loop optimization.
Only a packing whose ops carry a remat name, in a backward loop body
(hloflops.remat.fusion_copies.backward_loop_bodies), whose every piece is, through views and
fusions' boundaries, an element of the loop's state that its body hands back unchanged.
Of TPU draws 0-239 it fires on utpu 229 and tpu 53 (a bidirectional LSTM as well, whose in-loop
packing of the biases, `f32[512]`, was counted already; its `[2, 512]` packings of the gates'
cotangents read the carry and are left alone).
"""

from __future__ import annotations

from hloflops.cost.tpu import is_tpu_module
from hloflops.remat.fusion_copies import backward_loop_bodies
from hloflops.remat.packed_conv_inputs import is_packing
from hloflops.remat.sites import FUSION_BOUNDARY, SiteKey, SiteOp, across_fusion_boundary, one_call_site
from hloparse.ir import CallRole, Computation, Module, parameter_number

_VIEWS = frozenset({"bitcast", "reshape", "copy"})


def loop_invariant_packings(module: Module, ops: list[SiteOp], decided) -> None:
    """Count each such packing's ops remat, settled but not paired by value (`decided`:
    hloflops.remat.by_platform's `Decided`)."""
    if not is_tpu_module(module):
        return
    backward_loops = backward_loop_bodies(module, ops)
    if not backward_loops:
        return
    invariant = _invariant_state(module, backward_loops)
    if not invariant:
        return
    by_comp: dict[str, list[SiteOp]] = {}
    for op in ops:
        by_comp.setdefault(op.key[0], []).append(op)
    callers = one_call_site(module)
    found: set[SiteKey] = set()
    for comp in module.computations:
        for inst in comp.instructions:
            if inst.opcode != "fusion" or inst.attributes.get("kind") != "kLoop":
                continue
            names = inst.called(CallRole.FUSION)
            if len(names) != 1 or callers.get(names[0]) is None:
                continue
            body = module.by_name[names[0]]
            mine = by_comp.get(body.name, [])
            if not mine or not is_packing(body) or any(op.frame not in backward_loops for op in mine):
                continue
            if not all(op.named for op in mine if op.inst.opcode in ("maximum", "pad")):
                continue
            if all(_invariant(module, callers, invariant, comp, name) for name in inst.operands):
                found |= {op.key for op in mine}
    decided.remat = decided.remat | found
    decided.certain = decided.certain | found
    decided.stand_ins = decided.stand_ins - found


def _invariant_state(module: Module, loops: set[str]) -> dict[str, set[int]]:
    """For each backward loop body, the indices of its state its root hands back unchanged."""
    out: dict[str, set[int]] = {}
    for name in loops:
        body = module.by_name.get(name)
        if body is None or body.root is None or body.root.opcode != "tuple":
            continue
        params = [inst for inst in body.instructions if inst.opcode == "parameter"]
        if len(params) != 1:
            continue
        kept = set()
        for index, operand in enumerate(body.root.operands):
            inst = body.by_name.get(operand)
            if inst is not None and inst.opcode == "get-tuple-element" and tuple(inst.operands) == (params[0].name,) \
                    and int(inst.attributes.get("index", "-1")) == index:
                kept.add(index)
        out[name] = kept
    return out


def _invariant(module: Module, callers, invariant: dict[str, set[int]], comp: Computation, name: str,
               depth: int = 16) -> bool:
    """Is the value, through views and fusions' boundaries, an element of a backward loop's state
    that the loop's body hands back unchanged?"""
    while depth:
        depth -= 1
        inst = comp.by_name.get(name)
        if inst is None:
            return False
        if inst.opcode in _VIEWS and inst.operands:
            name = inst.operands[0]
            continue
        if inst.opcode == "get-tuple-element" and comp.name in invariant:
            source = comp.by_name.get(inst.operands[0])
            if source is not None and source.opcode == "parameter" and parameter_number(source) == 0:
                return int(inst.attributes.get("index", "-1")) in invariant[comp.name]
        if inst.opcode not in FUSION_BOUNDARY:
            return False
        step = across_fusion_boundary(module, callers, comp, inst)
        if step is None:
            return False
        comp, name = step
    return False
