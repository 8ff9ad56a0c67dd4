"""Recomputes whose forward is in sight only with a unit dimension more or less (TPU).

Under a policy that saves the attention scores (`dots_saveable` saves the batched einsum
`q @ k.T`), a scan's backward loop reads them back from the stack the forward loop wrote, in
jax's shape: with one head on each device (tensor parallelism over the heads, or one head) that
is `[b, 1, q, k]`, and the recompute of softmax scales it there, `s * (1 / sqrt(d))` as
`f32[b,1,q,k]`. The forward computes the same scaling straight off the einsum inside its fusion,
where XLA dropped the unit dimension: `f32[b,q,k]`. Value numbering cannot meet the two (the
recompute reads the stack), and TPU's `ForwardTwins` pairs by the whole signature (the squeezed
one only off TPU, hloflops.remat.forward_twins): no forward twin, so `_same_value` keeps the
recompute's first copy as model FLOPs, as it does a linearization coefficient that the forward
never computes (tanh's `1 - t`). hloflops.remat.linearization_copies then takes the values a
named op computes from it in its fusion for the coefficient's too (`derived`), and keeps the
first copy of each as model FLOPs: the recompute's `max` and `sum` of the scores (TPU utpu 183,
ntpu 131: reduce -11,904 and -7,200), though XLA never duplicates a reduce and the program
without remat, which stores the probabilities, runs no reduce of them in its backward.

The sign in this program: a forward op (not marked, not the backward's) in another loop body of
the recompute's opcode, signature with unit dimensions left out (`unit_dimension_free_signature`),
name inside the checkpoint, and constant operands (the scores' scale; the probabilities
`e * broadcast(1 / sum)`, also `div`, read none, and match only an op that reads none). Such a
value is the forward's, not the linearization's own: it is no coefficient, and what reads it
derives nothing from one. The twin cannot show the sign (nothing in it is remat-named). Of TPU
draws 0-239 it fires in nine programs with remat: the softmax chain of the three
`hk.layer_stack` attention draws under `dots_saveable` (ntpu 131, utpu 183, 201), and a layer
norm's `rsqrt` of `[b, t, 1]` (its forward's `[b, t]`) or flax's LayerNorm chain in six scans
(tpu 49, htpu 71, 82, 85, utpu 214, 215); only 131 and 183 move their split (the rest keep it,
some ranges a little wider where a copy once derived from the `rsqrt` is left unsure)."""

from __future__ import annotations

from hloflops.cost.tpu import is_tpu_module
from hloflops.remat.names import ends_with, inner_tail
from hloflops.remat.op_kinds import DUPLICATED, shape_key
from hloflops.remat.signature import ConstantOperands, signature, unit_dimension_free_signature
from hloflops.remat.sites import SiteKey, SiteOp
from hloflops.scopes import phase
from hloparse.ir import Module


def squeezed_forward_values(module: Module, ops: list[SiteOp], model: set[SiteKey]) -> set[SiteKey]:
    """The keys of `model` (a value's copy counted as model FLOPs for want of a forward twin) whose
    op, remat-named and elementwise with a unit dimension, has a forward twin in another loop body
    of the same unit-dimension-free signature, name inside its checkpoint and constant operands.
    TPU only, as the gap is: off TPU `ForwardTwins` and `by_signature` fall back to that signature
    (hloflops.remat.forward_twins, by_signature), on TPU not (its tiled layouts keep a scan's stacked
    unit dimension in both copies, TPU draw 29), so only there does such a copy reach `model`."""
    if not model or not is_tpu_module(module):
        return set()
    candidates = [op for op in ops if op.key in model and op.named and op.op_name
                  and op.inst.opcode in DUPLICATED and inner_tail(op.op_name)]
    if not candidates:
        return set()
    shapes = {inst.name: shape_key(inst.shape) for _, inst in module.instructions()}
    constants = ConstantOperands(module)
    pool: dict[tuple, list[SiteOp]] = {}
    for op in ops:
        if not op.marked and op.op_name and op.inst.opcode in DUPLICATED and phase(op.op_name) != "backward":
            pool.setdefault(unit_dimension_free_signature(signature(op, shapes)), []).append(op)
    found: set[SiteKey] = set()
    for op in candidates:
        own = signature(op, shapes)
        squeezed = unit_dimension_free_signature(own)
        if squeezed == own:  # no unit dimension to leave out: `ForwardTwins` looked already
            continue
        literals = constants.of(op.key[0], op.inst)  # the scores' scale, none for the probabilities
        tail = inner_tail(op.op_name)
        if any(twin.frame != op.frame and ends_with(twin.op_name, tail)
               and constants.of(twin.key[0], twin.inst) == literals for twin in pool.get(squeezed, ())):
            found.add(op.key)
    return found
