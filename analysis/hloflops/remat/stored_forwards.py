"""Values the forward stores (after optimization): a recompute's copies of such a value all run
because of remat (hloflops.remat.pairing asks `stored_forwards` before `_same_value` caps a
class's recompute copies at its forward's).

XLA's fusion copies a cheap producer into its readers' fusions only where it can fuse it into
all of them; where one reader cannot take it (a matmul, a reduce beside other reduces), the
producer is computed once, as a fusion's output, and every reader reads it stored. The program
without remat runs the same forward with more readers (the residuals its backward reads), so
it stores such a value too, once, and its backward reads it there: its copies of the value
number one. The program with remat computes the value once in its forward and again in each
fusion of the recompute that copies it, the gradient fusions too (where the program without
remat reads the forward's stored value): every recompute copy is recomputation. Base seed 142,
a Python loop of attention layers under `dots_saveable`: the residual sum `x + attn @ wo`, stored
by the forward beside its saved matmul output, is copied by the recompute into seven fusions
(both layer norm sums, the normalized value, the gradient fusions of both layer norms), against
one store without remat.

A forward that copies the value into several fusions, or only inside one (gelu's `1 + tanh`),
stores nothing: the program without remat copies it into fusions of its own, as the recompute
does, and the cap holds. Nor does a convert count: a float normalization's widen of a stored
bf16 value is computed again in each fusion reading the narrow value, without remat as with it
(base seed 145: a bias widened in the forward's fusion and again in a gradient fusion)."""

from __future__ import annotations

from collections import Counter

from hloparse.ir import CallRole, Module
from hloflops.remat.sites import SiteOp


def stored_forwards(module: Module, ops: list[SiteOp]) -> set:
    """The value numbers that exactly one unmarked op computes, as a value leaving its
    computation as it is: a fused computation's output (`_stored_outputs`) or an op of a
    computation XLA did not fuse (the entry, a loop body)."""
    fused = {callee for _, inst in module.instructions() if inst.opcode == "fusion"
             for callee in inst.called(CallRole.FUSION)}
    outputs = _stored_outputs(module, fused)
    copies = Counter(op.exact for op in ops if not op.marked)
    found = set()
    for op in ops:
        if op.marked or copies[op.exact] != 1 or isinstance(op.exact, tuple) or op.inst.opcode == "convert":
            continue
        comp = op.key[0]
        if comp in fused:
            if op.inst.name in outputs.get(comp, ()):
                found.add(op.exact)
        elif comp == op.frame:
            found.add(op.exact)
    return found


# Views that keep a value's elements where they are: a fusion handing its value out through them
# stores the value itself. A transpose or copy writes another layout (attention's `e / s`, laid
# out for the forward's matmul): the program without remat copies the value into a fusion of
# each layout its readers want, as the recompute does (hloflops.remat.view_copies).
_IN_PLACE = frozenset({"bitcast", "reshape", "tuple"})


def _stored_outputs(module: Module, fused: set[str]) -> dict[str, frozenset[str]]:
    """Each fused computation's ops whose value leaves it in place (its root, a tuple root's
    elements, through bitcasts and reshapes)."""
    out: dict[str, frozenset[str]] = {}
    for name in fused:
        comp = module.by_name.get(name)
        if comp is None or not comp.instructions:
            continue
        pending, found = [comp.root.name], set()
        while pending:
            inst = comp.by_name[pending.pop()]
            found.add(inst.name)
            if inst.opcode in _IN_PLACE:
                pending += [o for o in inst.operands if o in comp.by_name and o not in found]
        out[name] = frozenset(found)
    return out
