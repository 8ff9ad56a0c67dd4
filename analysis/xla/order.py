"""The order in which XLA's cost analysis visits a computation's instructions: its float32 sums
are added up in this order, so a different order can give a different float32 total."""

from __future__ import annotations

from itertools import chain, repeat
from operator import attrgetter, contains

from hloparse.ir import Computation, Instruction


def visit_order(computation: Computation) -> list[Instruction]:
    """HloComputation::Accept's order: each unreachable root (an instruction nobody uses that
    is not the root), then the root, each in post-order DFS with operands left to right."""
    instructions = computation.instructions
    return [instructions[i] for i in visit_positions(computation)]


def visit_positions(computation: Computation) -> list[int]:
    """`visit_order` as positions in `computation.instructions`."""
    instructions = computation.instructions
    n = len(instructions)
    # The setup runs in C (map, zip, sets): a computation can hold 30k instructions.
    position = dict(zip(map(_NAME, instructions), range(n)))
    operands = list(map(_OPERANDS, instructions))  # names; turned into positions on expansion
    used = set(chain.from_iterable(operands))
    if True in map(contains, map(_ATTRIBUTES, instructions), repeat("control-predecessors")):
        for i, inst in enumerate(instructions):
            if "control-predecessors" in inst.attributes:
                predecessors = _control_predecessors(inst)
                operands[i] = inst.operands + predecessors
                used.update(predecessors)
    root = position.get(computation.root.name, n - 1)
    unused = sorted(position[name] for name in position.keys() - used)  # what nobody uses
    starts = [i for i in unused if i != root] + [root]
    get = position.get
    state = bytearray(n)  # 0: not seen, 1: expanded, 2: done
    order: list[int] = []
    for start in starts:
        if state[start]:
            continue
        stack = [start]
        pop, push = stack.pop, stack.append
        while stack:
            i = pop()
            if i < 0:  # ~i's operands are done: so is it
                order.append(~i)
                state[~i] = 2
            elif not state[i]:  # expand it: it comes back (as ~i) after its operands
                state[i] = 1
                push(~i)
                for k in reversed(operands[i]):
                    k = get(k)
                    if k is not None and not state[k]:
                        push(k)
    return order


_NAME = attrgetter("name")
_OPERANDS = attrgetter("operands")
_ATTRIBUTES = attrgetter("attributes")


def _control_predecessors(inst: Instruction) -> tuple[str, ...]:
    raw = inst.attributes.get("control-predecessors")
    if not raw:
        return ()
    body = raw.strip().strip("{}")
    return tuple(p.strip().lstrip("%") for p in body.split(",") if p.strip())
