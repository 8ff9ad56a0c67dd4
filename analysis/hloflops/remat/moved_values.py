"""Value numbering (hloflops.remat.values) of the ops that move a value on the device.

TPU's compiler moves a weight before each use: it prefetches it into another memory space with
`copy-start` / `copy-done`, once for the forward's matmul and again for the recompute's, and
gathers an FSDP-sharded weight with an asynchronous collective, an `AsyncCollectiveStart`
custom-call on the collective, continuation fusions that carry the shard on in their tuples,
and an `AsyncCollectiveDone` custom-call on another copy of the collective. Numbered as values
of their own, these moves split a recompute from its forward at its first read of a weight:
everything computed from it downstream (a recomputed matmul, the gelu nested in the fusion of a
backward matmul) then matches no forward value exactly. So a move is numbered as the value it
delivers:

* `copy-done(copy-start(x))` is `x`: the start's tuple holds the destination and the source,
  both `x`, and a context. Not for a copy to or from the host's memory space (an offload
  policy's saved residual, sent to the host in the forward and fetched back for the backward):
  that round trip is the residual the policy saves, which the recompute reads as an input
  (as it reads an identity rounding's residual), and stays a value of its own;
* an `AsyncCollectiveDone` is what its collective computes (its other operands are the aliased
  destination buffer and sync flags), and an `AsyncCollectiveStart` hands its collective's
  operand on as its tuple's first element (the shard that the continuation and done fusions
  gather again: the start's fusion aliases that element to its operand). Its other elements
  (the buffer being written, sync flags) are values of their own.
"""

from __future__ import annotations

from hloflops.remat.op_kinds import shape_key
from hloparse.ir import Computation, Instruction, Shape

START, DONE = "AsyncCollectiveStart", "AsyncCollectiveDone"
# The collectives an async collective's custom-calls wrap.
WRAPPED = frozenset({"all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute"})
# What `MovedValues.number` may answer for (anything else is numbered as usual).
MOVES = frozenset({"copy-start", "copy-done", "custom-call"})
HOST_MEMORY_SPACE = 5  # XLA's memory space of the host (`S(5)` in a layout)


def _on_host(shape: Shape) -> bool:
    return shape.layout is not None and shape.layout.memory_space == HOST_MEMORY_SPACE


def lies_on_host(shape: Shape) -> bool:
    """Does the shape, or any part of a tuple shape, lie in the host's memory space?"""
    return any(_on_host(part) for part in (shape.tuple_shapes if shape.is_tuple else (shape,)))


class MovedValues:
    """Numbers the moves for a value numbering (`numbering`, hloflops.remat.values): `number`
    returns an op's (exact, abstract), or None where the op is not a move numbered here."""

    def __init__(self, numbering) -> None:
        self.numbering = numbering
        # A wrapped collective's exact number -> its operand's (exact, abstract): what an
        # AsyncCollectiveStart on it hands on (`note_collective`).
        self.collective_inputs: dict = {}

    def note_collective(self, exact, operand: tuple) -> None:
        self.collective_inputs.setdefault(exact, operand)

    def number(self, comp: Computation, inst: Instruction, exacts: tuple, abstracts: tuple) -> tuple | None:
        opcode, numbering = inst.opcode, self.numbering
        if opcode == "copy-start":
            parts = inst.shape.tuple_shapes if inst.shape.is_tuple else ()
            if len(exacts) != 1 or len(parts) < 2 or _on_host(parts[0]) or _on_host(parts[1]):
                return None
            return self._tuple(comp, inst, {0: (exacts[0], abstracts[0]), 1: (exacts[0], abstracts[0])})
        if opcode == "copy-done":
            if len(exacts) == 1 and isinstance(exacts[0], tuple) and exacts[0]:
                abstract = abstracts[0][0] if isinstance(abstracts[0], tuple) else numbering.leaf(inst.shape)
                return exacts[0][0], abstract
            return None
        target = inst.custom_call_target if opcode == "custom-call" else None
        if target == DONE:
            wrapped = [n for n, o in enumerate(inst.operands)
                       if o in comp.by_name and comp.by_name[o].opcode in WRAPPED]
            return (exacts[wrapped[0]], abstracts[wrapped[0]]) if len(wrapped) == 1 else None
        if target == START and len(exacts) == 1 and inst.shape.is_tuple:
            collective = comp.by_name.get(inst.operands[0])
            source = self.collective_inputs.get(exacts[0])
            if collective is None or collective.opcode not in WRAPPED or source is None or not collective.operands:
                return None
            shard = comp.by_name.get(collective.operands[0])
            parts = inst.shape.tuple_shapes
            if shard is None or not parts or shape_key(parts[0]) != shape_key(shard.shape):
                return None
            return self._tuple(comp, inst, {0: source})
        return None

    def _tuple(self, comp: Computation, inst: Instruction, known: dict[int, tuple]) -> tuple:
        """A tuple-shaped move's numbers: the `known` elements' (exact, abstract), the others
        values of their own."""
        numbering, exact, abstract = self.numbering, [], []
        for i, part in enumerate(inst.shape.tuple_shapes):
            if i in known:
                exact.append(known[i][0])
                abstract.append(known[i][1])
            else:
                exact.append(numbering.opaque(("moved", comp.name, inst.name, i), part))
                abstract.append(numbering.leaf(part))
        return tuple(exact), tuple(abstract)
