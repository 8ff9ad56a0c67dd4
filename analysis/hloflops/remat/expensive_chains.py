"""Expensive recomputes and the cheap chains under them, after optimization (hloflops.remat.
fusion_copies calls these). XLA never copies an expensive op (a transcendental, a divide) into a
second fusion, so where CSE left a recompute's cheap chain the forward's name, the pairing needs
to look through what the names say.

(`reshaped_twins`, which paired a recompute's `rsqrt` over a `[b, t, 1]` bitcast of a layer
norm's variance with the forward's over `[b, t]`, is gone: the value numbering gives both one
number since it sees through views that only add or drop unit dimensions (hloflops.remat.views),
and leaving it out changed no draw of base, more, tpu 0-179 or held-out base/more 150-299.)"""

from __future__ import annotations

from typing import Mapping

from hloflops.remat.op_kinds import EXPENSIVE
from hloflops.scopes import phase
from hloparse.ir import Module
from hloflops.remat.sites import SiteKey, SiteOp


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


def mirrored_chains(module: Module, by_key: Mapping[SiteKey, SiteOp], remat: set[SiteKey]) -> set[SiteKey]:
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
        if op.marked and key in remat and op.exact in twin_reads:
            out.update(k for k in read if not by_key[k].marked and by_key[k].exact in twin_reads[op.exact]
                       and by_key[k].op_name and phase(by_key[k].op_name) == "forward")
    return out
