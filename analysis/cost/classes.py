"""Computations that cost the same: one key per computation, equal for computations that differ
only in names.

A generated or unrolled module repeats each layer's fusion bodies and reducers hundreds of times
(a 28.8 MB transformer step: 22,395 computations, fewer than a hundred distinct ones). The engine
costs one computation of each key and hands its results to the others (`analysis.engine`).

The key holds everything a cost rule, the fusion-bytes code, XLA's visit order or the float32
sums can read of a computation, with the names taken out: per instruction its opcode, its shape
(the parser shares one Shape object per distinct shape text, so its id stands for it), its
operands as positions in the computation, its attributes (metadata included, which no rule reads:
leaving it in only costs matches) and, for an instruction that calls computations, each call
site's role, index and the callee's own class in place of the callee's name; and the root's
position. Attribute values that name instructions (control-predecessors) stay
as they are: such computations then match only when the names match too.

Everything is built by C loops (`map`, `zip`): computing a key must cost far less than
costing the computation, or nothing is gained.
"""

from __future__ import annotations

from itertools import chain
from operator import attrgetter, methodcaller
from typing import Hashable, Iterable, Mapping

from hloparse.call_sites import CALL_ATTRIBUTES
from hloparse.ir import Computation, Instruction

_NAME = attrgetter("name")
_OPCODE = attrgetter("opcode")
_SHAPE = attrgetter("shape")
_OPERANDS = attrgetter("operands")
_ATTRIBUTES = attrgetter("attributes")
_VALUES = methodcaller("values")


def structure_key(comp: Computation, class_of: Mapping[str, Hashable], callers: Iterable[Instruction] = ()) -> tuple:
    """The computation's structure without names (see the module docstring). `callers`: its
    instructions that call computations (from the call table: most computations call none);
    `class_of` gives a callee's class, and a callee without one stands for itself (its name).
    One flat tuple with the lengths in it: no small tuples to build and to hash."""
    instructions = comp.instructions
    n = len(instructions)
    if not n:
        return ()
    position = dict(zip(map(_NAME, instructions), range(n))).get
    operands = list(map(_OPERANDS, instructions))
    attributes = list(map(_ATTRIBUTES, instructions))
    calling = sorted({position(inst.name) for inst in callers})
    callees = []
    for i in calling:  # the attributes that name callees give way to the callees' classes
        attributes[i] = {k: v for k, v in attributes[i].items() if k not in CALL_ATTRIBUTES}
        callees.append(tuple((site.role, class_of.get(site.computation, site.computation), site.index)
                             for site in instructions[i].calls))
    root = n - 1 if instructions[-1].is_root else position(comp.root.name)
    # One flat tuple: n fixes where each per-instruction run ends, the lengths where each run of
    # operands and attributes ends, len(calling) where the callers end.
    return (n, *map(_OPCODE, instructions), *map(id, map(_SHAPE, instructions)),
            *map(len, operands), *map(position, chain.from_iterable(operands)),
            *map(len, attributes), *chain.from_iterable(attributes),
            *chain.from_iterable(map(_VALUES, attributes)), len(calling), *calling, *callees, root)
