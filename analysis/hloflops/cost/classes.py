"""Computations that cost the same: one key per computation, equal for computations that differ
only in names.

A generated or unrolled module repeats each layer's fusion bodies and reducers hundreds of times
(a 28.8 MB transformer step: 22,395 computations, fewer than a hundred distinct ones). The engine
costs one computation of each key and hands its results to the others (`hloflops.engine`).

The key holds everything a cost rule, the fusion-bytes code, XLA's visit order or the float32
sums can read of a computation, with the names taken out: per instruction its opcode, its shape
(the parser shares one Shape object per distinct shape text, so its id stands for it), its
operands as positions in the computation, its attributes (metadata included, which no rule reads:
leaving it in only costs matches) and, for an instruction that calls computations, each call
site's role, index and the callee's own class in place of the callee's name; and the root's
position. Attribute values that name instructions (control-predecessors) stay
as they are: such computations then match only when the names match too.

A computation that may share is most often tiny (a 3-instruction reducer, thousands of them in a
sharded module): the key is built in one loop over the instructions, which for a few instructions
costs far less than a chain of `map`s and `chain`s per field (callgrind, 3,809 reducers: -43%).
Computing a key must cost far less than costing the computation, or nothing is gained.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Hashable, Mapping

from hloparse.call_sites import CALL_ATTRIBUTES
from hloparse.ir import Computation

_NAME = attrgetter("name")


def structure_key(comp: Computation, class_of: Mapping[str, Hashable]) -> tuple:
    """The computation's structure without names (see the module docstring). `class_of` gives a
    callee's class, and a callee without one stands for itself (its name).
    One flat tuple, per instruction: its opcode, its shape's id, its number of operands and their
    positions, its number of attributes, their names and their values; an instruction that calls
    computations starts with the tuple of its call sites instead (a tuple, where every other
    instruction starts with its opcode: the two cannot be mistaken). Then the root's position."""
    instructions = comp.instructions
    n = len(instructions)
    if not n:
        return ()
    position = dict(zip(map(_NAME, instructions), range(n))).get
    key: list = [n]
    for inst in instructions:
        attributes = inst.attributes
        operands = inst.operands
        if inst.calls:  # the attributes that name callees give way to the callees' classes
            attributes = {k: v for k, v in attributes.items() if k not in CALL_ATTRIBUTES}
            key.append(tuple((site.role, class_of.get(site.computation, site.computation), site.index)
                             for site in inst.calls))
        key += (inst.opcode, id(inst.shape), len(operands), *map(position, operands),
                len(attributes), *attributes, *attributes.values())
    key.append(n - 1 if instructions[-1].is_root else position(comp.root.name))
    return tuple(key)
