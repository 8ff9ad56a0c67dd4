"""Values the forward stores (after optimization): a recompute's copies of such a value all run
because of remat (hloflops.remat.pairing asks `StoredForwards.copies` beside `_same_value`, which
caps a class's recompute copies at its forward's).

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
(base seed 145: a bias widened in the forward's fusion and again in a gradient fusion).

A value the forward computes once inside such a fusion, only to build the stored value there
(`hk.MultiHeadAttention`'s output bias add under the residual sum, more seed 111), is computed
once by the program without remat too, there: a recompute copy of it that feeds nothing but
copies of the stored value runs because of remat (in place of the cap's count). A copy that
feeds anything else (gelu's derivative in its gradient fusion) is left to the cap and to
hloflops.remat.fusion_copies.

Not on TPU, whose fusion copies a cheap producer into its readers' fusions (nested in a matmul's
output fusion too) even where one of them stores it: there the program without remat copies the
stored value as the recompute does (TPU draws 0, 19, 45, 58 moved away from the truth).

Only where the forward is in sight with an equal value number: where the recompute read other
inputs (all its copies remat-marked, `ForwardTwins` matching the forward by signature and name),
the candidates are too loose to tell a stored twin (base seed 142: gelu's jvp coefficient
`3 * x ** 2` finds both layer norms' stored outputs). A recompute whose copies hold the
stored value but for unit dimensions (base seeds 105 and 136: the residual sum over a layer norm's
`[b, t, 1]` rsqrt) has its value number: the numbering looks through unit dimensions
(hloflops.remat.views)."""

from __future__ import annotations

from collections import Counter

from hloparse.ir import CallRole, Module
from hloflops.remat.fusion_copies import fused_outputs, outermost_fusions, outputs_through
from hloflops.remat.sites import SiteKey, SiteOp


class StoredForwards:
    """The forward's stored values (`values`): the value numbers that exactly one unmarked op
    computes, as a value leaving its computation as it is (a fused computation's output in
    place, `_stored_outputs`, not nested in another fusion, or an op of a computation XLA did
    not fuse: the entry, a loop body). `copies` finds, for a class of equal values, the recompute copies that run only
    because the program stores nothing of the recompute."""

    def __init__(self, module: Module, ops: list[SiteOp]) -> None:
        self.module = module
        self.fused = {callee for _, inst in module.instructions() if inst.opcode == "fusion"
                      for callee in inst.called(CallRole.FUSION)}
        # a fusion nested inside another (TPU's loop fusion inside a matmul's) hands its value to
        # the outer fusion only: stored nowhere
        outputs = _stored_outputs(module, self.fused - set(outermost_fusions(module)))
        self.leaving = fused_outputs(module)
        copies = Counter(op.exact for op in ops if not op.marked)
        self.once = {value for value, n in copies.items() if n == 1}
        self.by_key = {op.key: op for op in ops}
        self.values = set()
        for op in ops:
            if op.marked or op.exact not in self.once or isinstance(op.exact, tuple) or op.inst.opcode == "convert":
                continue
            comp = op.key[0]
            if comp in self.fused:
                if op.inst.name in outputs.get(comp, ()):
                    self.values.add(op.exact)
            elif comp == op.frame:
                self.values.add(op.exact)
        self._readers: dict[str, dict[str, list[str]]] = {}
        self._under: dict[SiteKey, bool] = {}

    def copies(self, members: list[SiteOp]) -> set[SiteKey]:
        """Every marked copy of a stored value; of a value the forward computes once inside
        the fusion of a stored value it feeds (a bias add under the residual sum), the copies
        that feed only recompute copies of stored values (`_feeds_stored`)."""
        value = members[0].exact
        if members[0].inst.opcode == "convert":  # see the module's docstring
            return set()
        if value in self.values:
            return {m.key for m in members if m.marked}
        if value not in self.once:
            return set()
        return {m.key for m in members if m.marked and self._feeds_stored(m.key)}

    def _feeds_stored(self, key: SiteKey) -> bool:
        """Is the marked op inside a fusion, read there (through views) only by marked copies
        of stored values or of values that feed only those, and handed out of it by none?"""
        if key in self._under:
            return self._under[key]
        self._under[key] = False  # a cycle guard; fused computations have none
        comp_name, name, site = key
        found = False
        if comp_name in self.fused:
            readers = self._readers_of(comp_name)
            comp = self.module.by_name[comp_name]
            pending, seen, found = [name], {name}, True
            while pending and found:
                current = pending.pop()
                if current in self.leaving.get(comp_name, ()):
                    found = False
                    break
                for reader in readers.get(current, ()):
                    op = self.by_key.get((comp_name, reader, site))
                    if comp.by_name[reader].opcode in _VIEWS or op is None:
                        if reader not in seen:
                            seen.add(reader)
                            pending.append(reader)
                    elif not (op.marked and (op.exact in self.values or
                                             (op.exact in self.once and self._feeds_stored(op.key)))):
                        found = False
                        break
        self._under[key] = found
        return found

    def _readers_of(self, comp_name: str) -> dict[str, list[str]]:
        if comp_name not in self._readers:
            readers: dict[str, list[str]] = {}
            for inst in self.module.by_name[comp_name].instructions:
                for operand in set(inst.operands):
                    readers.setdefault(operand, []).append(inst.name)
            self._readers[comp_name] = readers
        return self._readers[comp_name]


# Views that keep a value's elements where they are: a fusion handing its value out through them
# stores the value itself. A transpose or copy writes another layout (attention's `e / s`, laid
# out for the forward's matmul): the program without remat copies the value into a fusion of
# each layout its readers want, as the recompute does (hloflops.remat.view_copies).
_IN_PLACE = frozenset({"bitcast", "reshape", "tuple"})
# Ops that hand their operand's elements on inside a fusion, computing nothing.
_VIEWS = frozenset({"bitcast", "reshape", "copy", "transpose", "broadcast"})


def _stored_outputs(module: Module, fused: set[str]) -> dict[str, frozenset[str]]:
    """Each fused computation's ops whose value leaves it in place (its root, a tuple root's
    elements, through bitcasts and reshapes)."""
    out: dict[str, frozenset[str]] = {}
    for name in fused:
        comp = module.by_name.get(name)
        if comp is None or not comp.instructions:
            continue
        out[name] = outputs_through(comp, _IN_PLACE)
    return out
