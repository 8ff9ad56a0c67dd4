"""Expensive recomputes and the cheap chains under them, after optimization (hloflops.remat.
fusion_copies calls these). XLA never copies an expensive op (a transcendental, a divide) into a
second fusion, so where a recompute's expensive op matched no value, or CSE left its cheap chain
the forward's name, the pairing needs to look through what the numbering keeps apart."""

from __future__ import annotations

from typing import Mapping

from hloflops.remat.op_kinds import EXPENSIVE
from hloflops.scopes import phase
from hloparse.ir import Module
from hloflops.remat.sites import SiteKey, SiteOp


def reshaped_twins(module: Module, ops: list[SiteOp], remat: set[SiteKey]) -> dict[SiteKey, SiteOp]:
    """Remat-marked expensive elementwise ops of one operand, left unpaired, that apply their
    opcode to a value an unmarked op applies it to, read through bitcasts, reshapes and copies
    that only add or drop unit dimensions: each such op and its forward twin. A layer norm keeps
    its variance `[b, t, 1]`: XLA bitcasts the `[b, t]` sums for the recompute's `rsqrt` and not
    for the forward's, so the two rsqrts are two values to the numbering (a result shape of its
    own) though they hold the same elements, and the recompute's matched nothing (base draws 9,
    12, 13, 74, 96). Only these ops are matched so, after the pairing: numbering every value
    without its unit dimensions moves classes the pairing splits by how many copies the forward
    computes (more draws 9 and 88)."""
    wanted = [op for op in ops if op.marked and op.key not in remat and op.inst.opcode in EXPENSIVE
              and len(op.inst.operands) == 1]
    if not wanted:
        return {}
    by_key = {op.key: op for op in ops}
    forward: dict[tuple, SiteOp] = {}  # (opcode, element type, the operand's value) -> an unmarked op
    for op in ops:
        if not op.marked and op.inst.opcode in EXPENSIVE and len(op.inst.operands) == 1:
            read = _through_unit_views(module, op, by_key)
            if read is not None:
                forward.setdefault((op.inst.opcode, op.inst.shape.element_type, read.exact), op)
    out: dict[SiteKey, SiteOp] = {}
    for op in wanted:
        read = _through_unit_views(module, op, by_key)
        twin = forward.get((op.inst.opcode, op.inst.shape.element_type, read.exact)) if read is not None else None
        if twin is not None and twin.frame == op.frame:
            out[op.key] = twin
    return out


def _through_unit_views(module: Module, op: SiteOp, by_key: Mapping[SiteKey, SiteOp]) -> SiteOp | None:
    """The op whose value `op` reads as its one operand, through copies and through bitcasts and
    reshapes that only add or drop unit dimensions (None where the chain does more)."""
    comp = module.by_name[op.key[0]]
    inst = comp.by_name.get(op.inst.operands[0])
    while inst is not None and inst.opcode in ("copy", "bitcast", "reshape") and len(inst.operands) == 1:
        source = comp.by_name.get(inst.operands[0])
        if source is None or unit_free(source.shape) != unit_free(inst.shape):
            return None
        inst = source
    return by_key.get((op.key[0], inst.name, op.key[2])) if inst is not None else None


def unit_free(shape) -> tuple | None:
    """The shape's element type, its dimensions but the unit ones, and their order in memory
    (minor to major, by rank among those dimensions): equal for two shapes that hold the same
    elements in the same places. None for a tiled layout."""
    if shape.is_tuple:
        return None
    layout = shape.layout
    if layout is not None and layout.details:
        return None
    order = layout.minor_to_major if layout is not None and layout.minor_to_major \
        else tuple(reversed(range(len(shape.dims))))
    kept = [d for d in range(len(shape.dims)) if shape.dims[d] != 1]
    rank = {d: i for i, d in enumerate(kept)}
    return (shape.element_type, tuple(shape.dims[d] for d in kept), tuple(rank[d] for d in order if d in rank))


def mirrored_chains(module: Module, by_key: Mapping[SiteKey, SiteOp], remat: set[SiteKey],
                     twins: Mapping[SiteKey, SiteOp]) -> set[SiteKey]:
    """The unmarked ops an expensive recompute reads inside its fusion whose values its forward
    twin (an unmarked expensive op of the same value) also reads inside its own fusion. XLA never
    copies the expensive op, so each of the two fusions computes the cheap chain under it for
    itself: the recompute's copy of the chain runs because of remat, though CSE merged the
    recompute's own chain into the forward's and left it the forward's name (seed 74: a layer
    norm's `max(mean(x*x) - mean(x)^2, 0) + eps` under the recompute's `rsqrt`, prevent_cse=False).
    A chain above a residual the policy saves (its name's reduce-precision marker), or one the
    forward twin does not compute for itself (it reads the value from another fusion), is the
    input the recompute reads, copied there as XLA copies it into any reader, and keeps its
    pairing (the saved `x` under gelu's recomputed `tanh`: base draws 0, 3 and 75 would count
    its bias add once too often). Only ops named in the forward pass: an unnamed one (XLA's
    widening of a bf16 input) is the fusion's own (more draw 9)."""
    reads: dict[SiteKey, list[SiteKey]] = {}  # an expensive op -> the ops it reads in its fusion
    for key, op in by_key.items():
        if op.inst.opcode not in EXPENSIVE:
            continue
        comp = module.by_name[key[0]]
        found, pending = set(), list(op.inst.operands)
        while pending:
            name = pending.pop()
            if name in found or name not in comp.by_name:
                continue
            inst = comp.by_name[name]
            if inst.opcode == "reduce-precision":  # a policy's saved residual: what lies above is the input
                continue
            found.add(name)
            pending += inst.operands
        reads[key] = [(key[0], name, key[2]) for name in found if (key[0], name, key[2]) in by_key]
    twin_reads: dict[object, set] = {}  # an unmarked expensive op's value -> the values it reads in its fusion
    for key, read in reads.items():
        op = by_key[key]
        if not op.marked:
            twin_reads.setdefault(op.exact, set()).update(by_key[k].exact for k in read)
    out: set[SiteKey] = set()
    for key, read in reads.items():
        op = by_key[key]
        value = twins[key].exact if key in twins else op.exact
        if op.marked and key in remat and value in twin_reads:
            out.update(k for k in read if not by_key[k].marked and by_key[k].exact in twin_reads[value]
                       and by_key[k].op_name and phase(by_key[k].op_name) == "forward")
    return out
