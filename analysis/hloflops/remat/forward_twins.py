"""The forward's copies of a value whose recompute copies are all remat-marked, found by
signature and name where the value numbers cannot meet (hloflops.remat.pairing's `_same_value`
asks how many there are): before optimization in another frame (`NamedForward`), after
optimization anywhere the recompute reads other inputs than the forward (`ForwardTwins`)."""

from __future__ import annotations

from collections import Counter

from hloflops.cost.tpu import is_tpu_module
from hloflops.remat.inputs import FrameInputs
from hloflops.remat.names import ends_with, inner_tail, remat_level
from hloflops.remat.signature import ConstantOperands, signature, unit_dimension_free_signature
from hloflops.remat.op_kinds import DUPLICATED, is_identity_rounding, shape_key
from hloflops.remat.values import Val
from hloflops.scopes import phase
from hloparse.ir import Module
from hloflops.remat.sites import SiteOp


class NamedForward:
    """Before optimization, how often another frame's forward computes, under the recompute's
    name, a value whose copies are all remat-marked and whose abstract number no forward op has:
    the recompute's inputs are built differently from the forward's upstream (hk_layer_stack's
    LayerNorm: the forward's `jit(_var)` reads its divisor and `where` fill from the loop's
    inputs, which jax hoisted out as known values, while the recompute's `jit(_var)` computes
    them in place), so every number below differs. The forward's copies are then the unmarked
    ops of another frame, not the backward's, of the same signature whose op_name ends with a
    copy's name inside its checkpoint (`by_signature.by_signature`'s test) and that reads operands of the
    same kinds in the same pattern: gelu's `x ** 3` is `(x * x) * x` under one name, and only
    `x * x` is a twin of a copy of `x * x` (the backward's second copy is jvp's own, for the
    derivative `3 * x ** 2`). Each name counts its own."""

    def __init__(self, module: Module, ops: list[SiteOp]):
        self.shapes = {inst.name: shape_key(inst.shape) for _, inst in module.instructions()}
        # A policy's saved residual is an identity rounding in the forward and an input of the
        # recompute (read back from the saved stack): both are where the saved value comes from.
        self.opcodes = {(comp.name, inst.name): "input" if is_identity_rounding(inst) else inst.opcode
                        for comp in module.computations for inst in comp.instructions}
        self.pool: dict[tuple, list[SiteOp]] = {}
        for op in ops:
            if not op.marked and op.op_name and phase(op.op_name) != "backward":
                self.pool.setdefault(self._key(op), []).append(op)

    def _key(self, op: SiteOp) -> tuple:
        operands = op.inst.operands
        kinds = tuple("input" if kind in ("parameter", "get-tuple-element", "opt-barrier") else kind
                      for kind in (self.opcodes.get((op.key[0], name)) for name in operands))
        return signature(op, self.shapes), kinds, tuple(operands.index(name) for name in operands)

    def count(self, members: list[SiteOp]) -> int:
        """The most copies one execution of the forward computes: a forward callee called at
        several sites (an unrolled gradient accumulation's microbatches) computes the value once
        at each, and the class is one site's recompute."""
        frames = {m.frame for m in members}
        best = 0
        for m in members:
            tail = inner_tail(m.op_name) if m.named and m.op_name else ()
            if tail:
                per_site = Counter((twin.frame, twin.key[2]) for twin in self.pool.get(self._key(m), ())
                                   if twin.frame not in frames and ends_with(twin.op_name, tail))
                best = max(best, max(per_site.values(), default=0))
        return best


class ForwardTwins:
    """How often the forward computes, elsewhere, the value of a class of remat-marked copies
    (after optimization). Where every copy of a value is remat-named, either CSE merged the
    forward into the recompute (one copy is the model's), or the recompute reads its inputs from
    other ops than the forward (a whole-model checkpoint's recompute reads recomputed
    activations that XLA fused differently from the forward's; a layer's recompute reads a
    saved stack's slice): its value numbers then differ from the forward's, and the forward's
    copies are ops of the same signature and name (`by_signature.by_signature`'s test) that are not
    remat-marked, not the backward's, and read the same frame inputs, and whose value no marked
    op at the class's level computes (`remat_level`: nested remat recomputes a layer at two):
    that value's recompute matched it exactly, and it is another layer's (the frame inputs do not
    tell layers apart where all read one stacked weight: an unrolled scan's layer norms, base
    draws 68, 102, 166, took every layer's `var + eps` as the forward copies of this one's).
    XLA copies a cheap op into as many fusions as read it, in the recompute as in the program
    without remat (seed 128: a
    layer norm's variance, copied into three fusions of the recompute and three of the twin's
    forward, one of the program's forward): the recompute counts as many copies as the forward
    has, the rest are the twin's too. Where those forward copies lie in another loop body (a
    scan's forward loop, the class in its backward loop: `in_other_frames`), the count rests on
    how XLA fused both programs (hloflops.remat.across_loops), as a signature twin's there does."""

    def __init__(self, module: Module, ops: list[SiteOp]):
        self.shapes = {inst.name: shape_key(inst.shape) for _, inst in module.instructions()}
        self.inputs = FrameInputs(module)
        self.pool: dict[tuple, list[SiteOp]] = {}
        self.squeezed: dict[tuple, list[SiteOp]] = {}  # the pool by signature without unit dimensions
        self.constants = ConstantOperands(module)
        # Not TPU's: its backward loop's copies are counted per value by
        # hloflops.remat.backward_loop_copies, which took the twins of the signature alone (TPU
        # draw 49, an offloaded hk.layer_stack, moved further under with the preference below).
        self.tpu = is_tpu_module(module)
        self.copies = Counter()  # how many unmarked ops compute each value
        self.first: dict[Val, int] = {}  # each value's first unmarked op, in module order
        self.frames: dict[Val, set[str]] = {}  # the frames each value's unmarked ops run in
        # the levels (`remat_level`) at which a marked op computes each value: the levels whose
        # recompute of it matched the forward's value exactly
        self.recomputed: dict[Val, set[tuple[int, int]]] = {}
        for op in ops:
            if op.marked:
                level = remat_level(op.op_name, op.inherited) if op.op_name else None
                self.recomputed.setdefault(op.exact, set()).add(level)
            else:
                self.copies[op.exact] += 1
                self.first.setdefault(op.exact, op.order)
                self.frames.setdefault(op.exact, set()).add(op.frame)
                if op.op_name and phase(op.op_name) != "backward":
                    own = signature(op, self.shapes)
                    self.pool.setdefault(own, []).append(op)
                    self.squeezed.setdefault(unit_dimension_free_signature(own), []).append(op)

    def values(self, members: list[SiteOp]) -> frozenset[Val]:
        """The forward's values of the class's signature and name (each with all its copies);
        where its copies differ by unit dimensions (hloflops.remat.views), the first shape's
        that finds any."""
        first = min(members, key=lambda m: m.order)
        shapes = {m.inst.shape.dims: m for m in sorted(members, key=lambda m: m.order)}
        for op in [first] + [m for dims, m in shapes.items() if dims != first.inst.shape.dims]:
            if found := self._values(op, members):
                return found
        return frozenset()

    def _values(self, op: SiteOp, members: list[SiteOp]) -> frozenset[Val]:
        tail = inner_tail(op.op_name)
        if not tail or not op.op_name:
            return frozenset()
        level = remat_level(op.op_name, op.inherited)
        own = signature(op, self.shapes)

        def twins(pool: list[SiteOp]) -> list[SiteOp]:
            return [twin for twin in pool if ends_with(twin.op_name, tail)
                    and level not in self.recomputed.get(twin.exact, ())
                    and (twin.frame != op.frame or same_inputs(self.inputs, op, twin))]
        # An elementwise op's twins that multiply by the very constants it does, unit dimensions
        # aside: XLA may lay out the recompute's copy with a unit dimension the forward's lacks
        # (one attention head: the scores `s * (1 / sqrt(d))` as `[b, 1, q, k]` against the
        # forward's `[b, q, k]`), where the probabilities `e * broadcast(1 / sum)`, of the
        # recompute's very shape and name (`div`), are another value (more 80). Only a forward in
        # other loop bodies (a scan's backward loop against its forward loop): in one frame the
        # recompute of those probabilities, handed as it is to the values' gradient matmul, stands
        # for the program without remat's forward fusion laying them out for it, which no rule
        # settles yet, and the old count of one matched value offset that (base 82).
        if own[0] in DUPLICATED and not self.tpu:
            constants = self.constants.of(op.key[0], op.inst)
            if any(c is not None for c in constants):
                same = [twin for twin in twins(self.squeezed.get(unit_dimension_free_signature(own), ()))
                        if self.constants.of(twin.key[0], twin.inst) == constants]
                if same and all(twin.frame not in {m.frame for m in members} for twin in same):
                    return frozenset(twin.exact for twin in same)
        return frozenset(twin.exact for twin in twins(self.pool.get(own, ())))

    def counts(self, classes: list[list[SiteOp]]) -> dict[int, int]:
        """How many forward copies each class (by `id`) counts. Classes that find the same
        forward values share them, a value to one class: a layer norm's `sum(x) / n` and
        `sum(x * x) / n` are multiplies of one signature and one name (`LayerNorm_0/div`), and
        each recomputed value has its own forward value (seed 2: the forward copies the mean
        twice and the mean square once, the recompute four and three times; counting both
        forward values for each class made 3 + 3 copies recompute, not 2 + 1). Which value is
        which is not in the numbers (the recompute reads other inputs): XLA copies a value into
        as many fusions as read it, in the recompute as in the forward, so the class with more
        copies takes the value with more. A class left without a value has no forward in sight."""
        groups: dict[frozenset[Val], list[list[SiteOp]]] = {}
        for members in classes:
            groups.setdefault(self.values(members), []).append(members)
        out: dict[int, int] = {}
        for values, members_of in groups.items():
            if not values:
                continue
            copies = [self.copies[v] for v in sorted(values, key=lambda v: (-self.copies[v], self.first[v]))]
            members_of.sort(key=lambda c: (-len(c), min(m.order for m in c)))
            for members, n in zip(members_of, copies):
                out[id(members)] = n
            # Values beyond one per class are more copies of a class's value that the forward
            # numbered apart (one class: every value it found is its own): the largest class's.
            out[id(members_of[0])] += sum(copies[len(members_of):])
        return out


def in_other_frames(twins: ForwardTwins, members: list[SiteOp]) -> bool:
    """Does the forward that `ForwardTwins` found for a class run only in frames other than the
    class's copies (a scan's forward loop body, the recompute in the backward's)? Such copies are
    paired with their forward in another loop body, as `by_signature`'s are across frames."""
    values = twins.values(members)
    frames = {m.frame for m in members}
    return bool(values) and all(twins.frames.get(value, set()).isdisjoint(frames) for value in values)


def same_inputs(inputs: FrameInputs, op: SiteOp, twin: SiteOp) -> bool:
    """Do two ops of one frame read the same inputs of it (`FrameInputs`)? Unknown counts as yes."""
    mine, theirs = inputs.of(*op.key[:2]), inputs.of(*twin.key[:2])
    return mine is None or theirs is None or mine == theirs
