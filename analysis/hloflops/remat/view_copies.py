"""Cheap recomputes XLA copied into a fusion that lays a value out for the backward
(hloflops.remat.pairing calls `view_copies` after `fusion_copies`).

After optimization a cheap elementwise value with readers that want it in different layouts
(attention's key `x @ w + b`: transposed one way for the scores `q @ k^T`, another way for the
query's gradient `dS @ k`) is not materialized: XLA copies it into one fusion per layout, each
computing the value and writing one transposition of it. The program without remat does so for
the forward's value, the backward's layout included. With remat, the forward's fusions write
only the layouts the forward reads, and the recompute's fusion writes the backward's: it stands
in for the copy the program without remat makes, in its forward, for the backward. Nothing
runs because of remat (more seeds 35, 118, 120: the key's bias add of `hk.MultiHeadAttention`,
2,048 and 262,144 FLOPs a layer, is computed twice in both programs).

A recompute that writes a layout the forward also writes is a recompute as paired (the program
without remat reads the forward's); so is one whose forward is materialized (a fusion hands the
value itself on: the program without remat transposes that, computing nothing again). The rule
rests on how XLA fused the program without remat, which is not in sight: the ops it decides are
model FLOPs, left unsure (`RematIndex.unsure`: the range covers them as recompute too)."""

from __future__ import annotations


from hloflops.remat.op_kinds import DUPLICATED, EXPENSIVE
from hloparse.ir import Computation, Module
from hloflops.remat.sites import SiteKey, SiteOp, fusion_call_counts


# A convert is left out, as by `saved_by_the_twin`: a recomputed cast (a bf16 activation laid out
# for a matmul) is no copy the program without remat makes for its backward (the generator's bf16
# LM and loop forms: their converts moved away from the truth, base seeds 5, 103, 112, 145, more
# seeds 17, 113).
CHEAP = DUPLICATED - EXPENSIVE - {"convert"}
# What a layout fusion holds besides its cheap ops: its inputs, and ops that compute nothing.
_MOVES = frozenset({"parameter", "constant", "broadcast", "bitcast", "reshape", "transpose", "copy", "iota"})
# The views between a layout fusion's root and the value it lays out.
_VIEWS = frozenset({"bitcast", "reshape", "transpose", "copy"})


def view_copies(module: Module, ops: list[SiteOp], remat: set[SiteKey]) -> tuple[set[SiteKey], set[SiteKey]]:
    """The recompute less the cheap ops of a remat-marked layout fusion (one that computes only
    cheap elementwise ops and hands out a transposition of its last one, `transposing_fusion`) where:
    no unmarked op writes that transposition, and an unmarked op computes the same value (equal
    exact number; else equal abstract number in another frame: a scan's forward loop) inside
    an unmarked layout fusion of its own, writing another transposition. Returns the recompute
    and the ops this rule found to be model FLOPs."""
    if not module.is_scheduled:
        return remat, set()
    callers = fusion_call_counts(module)
    by_key = {op.key: op for op in ops if callers.get(op.key[0]) == 1}
    laid_out: dict[str, tuple[SiteOp, SiteOp]] = {}  # fused computation -> (its value, the view it writes)
    for name in callers:
        comp = module.by_name.get(name)
        found = transposing_fusion(comp, by_key) if comp is not None and callers[name] == 1 else None
        if found is not None:
            laid_out[name] = found
    if not laid_out:
        return remat, set()
    unmarked_views = {op.abstract for op in ops if not op.marked and op.inst.opcode == "transpose"}
    forward = [value for value, view in laid_out.values() if not value.marked and not view.marked]
    cheap_marked: dict[str, list[SiteOp]] = {}  # a layout fusion's marked cheap ops
    for op in ops:
        if op.key[0] in laid_out and op.marked and op.inst.opcode in CHEAP:
            cheap_marked.setdefault(op.key[0], []).append(op)
    decided: set[SiteKey] = set()
    for name, (value, view) in laid_out.items():
        if not (value.marked and view.abstract not in unmarked_views):
            continue
        if not any(_same_value(value, twin) and twin_view.abstract != view.abstract
                   for twin in forward for twin_view in (laid_out[twin.key[0]][1],)):
            continue
        marked = cheap_marked.get(name, [])
        if all(op.key in remat for op in marked):
            decided |= {op.key for op in marked}
    return remat - decided, decided


def _same_value(op: SiteOp, twin: SiteOp) -> bool:
    if op.exact == twin.exact:
        return True
    return twin.frame != op.frame and op.abstract == twin.abstract and not isinstance(op.abstract, tuple)


def transposing_fusion(comp: Computation, by_key: dict[SiteKey, SiteOp]) -> tuple[SiteOp, SiteOp] | None:
    """A fusion that computes only cheap elementwise ops and whose root is a transposition of the
    last of them (through bitcasts and copies): that op and the transpose (their `SiteOp`s), else
    None."""
    if any(inst.opcode not in CHEAP and inst.opcode not in _MOVES for inst in comp.instructions):
        return None
    inst, view = comp.root, None
    while inst.opcode in _VIEWS:
        if inst.opcode == "transpose" and view is None:
            view = by_key.get((comp.name, inst.name, 0))
            if view is None:  # a transpose that keeps the elements in place: no other layout
                return None
        inst = comp.by_name.get(inst.operands[0]) if inst.operands else None
        if inst is None:
            return None
    value = by_key.get((comp.name, inst.name, 0))
    if view is None or value is None or inst.opcode not in CHEAP:
        return None
    return value, view
