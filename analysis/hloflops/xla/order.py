"""The order in which XLA's cost analysis visits a computation's instructions: its float32 sums
are added up in this order, so a different order can give a different float32 total."""

from __future__ import annotations

from itertools import chain, compress, repeat
from operator import attrgetter, contains
from typing import Callable, Iterable, Sequence

from hloparse.ir import Computation, Instruction


def visit_order(computation: Computation) -> list[Instruction]:
    """HloComputation::Accept's order: each unreachable root (an instruction nobody uses that
    is not the root), then the root, each in post-order DFS with operands left to right."""
    instructions = computation.instructions
    return [instructions[i] for i in visit_positions(computation)]


def visit_positions(computation: Computation, kept: Callable[[], Sequence[bool]] | None = None) -> Sequence[int]:
    """`visit_order` as positions in `computation.instructions` (`range(n)` when it is the text
    order, as it almost always is). With `kept` (which gives a flag
    per instruction, asked for only where the walk does not follow the text order), only the order
    of the kept instructions is asked for: the others must have no operands (a leaf that adds
    nothing to a sum), and may be left out of the answer. Leaving a leaf out changes nothing in the
    order of the rest: walking it walks only itself."""
    instructions = computation.instructions
    n = len(instructions)
    operands = list(map(_OPERANDS, instructions))  # names; turned into positions on expansion
    if True in map(contains, map(_ATTRIBUTES, instructions), repeat("control-predecessors")):
        kept = None  # a control successor is no leaf: keep it simple, keep all
        for i, inst in enumerate(instructions):
            if "control-predecessors" in inst.attributes:
                operands[i] = inst.operands + _control_predecessors(inst)
    position = dict(zip(instruction_names(computation), range(n)))
    get = position.get
    root_last = n > 0 and computation.root is instructions[-1]
    if root_last and _walked_in_text_order(get, operands, ()):
        return range(n)  # the root alone walks everything (the usual case: no set of names needed)
    used = set(chain.from_iterable(operands))
    unused = sorted(position[name] for name in position.keys() - used)  # what nobody uses
    if root_last:
        if unused != [n - 1] and _walked_in_text_order(get, operands, unused):
            return range(n)
        flags = kept() if kept is not None else None
        if flags is not None and flags[-1]:  # the same check without the leaves left out
            # The setup runs in C (map, zip, compress): a computation can hold 30k instructions.
            positions = list(compress(range(n), flags))
            names = dict(zip(map(_NAME, map(instructions.__getitem__, positions)), range(len(positions))))
            # A kept instruction is used by a kept one or by none (a leaf uses nothing).
            if _walked_in_text_order(names.get, list(map(operands.__getitem__, positions)),
                                     sorted(names[name] for name in names.keys() - used)):
                return positions
    root = get(computation.root.name, n - 1)
    starts = [i for i in unused if i != root] + [root]
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


def instruction_names(computation: Computation) -> Iterable[str]:
    """The instructions' names in text order: the keys of `computation.by_name` (the parser's
    validation has built it, in text order), which a dict is built from in C without reading
    each instruction's name (an ENTRY of 30k instructions); read off the instructions where two
    share a name (a Computation not made by the parser)."""
    by_name = computation.by_name
    return by_name if len(by_name) == len(computation.instructions) else map(_NAME, computation.instructions)


def _walked_in_text_order(position: Callable[[str, int], int], operands: list[tuple[str, ...]],
                          unused: Sequence[int]) -> bool:
    """Do the post-order walks from each unused instruction (`unused`, ascending; what nobody
    uses), then from the last one (the root), visit every instruction in text order? They almost
    always do (XLA prints a computation in post-order; an ENTRY's unused parameters and
    get-tuple-elements are walked first, each in its place), and this check costs half the walk.
    `position(name, -1)` gives an operand's position, or -1 for a name the walk skips (one that
    names no instruction, or a leaf left out).

    If they do, the walk from start s begins right after the previous start and ends at s; and
    the walk that starts at instruction v, when everything before position first[v] is done,
    finishes the instructions first[v] .. v in turn: each operand at or after the position where
    that walk stands is walked next and must start right there, each operand before it is done
    already, and the last operand walked must end just before v. Checked from the last
    instruction down, each instruction's first position being set by its start or by the one
    instruction that walks it; anything else (an operand after its user, an instruction walked
    twice or never) says no, and the caller walks."""
    first = [-1] * len(operands)
    begin = 0
    for start in unused:  # nobody walks an unused instruction: its start sets its first position
        first[start] = begin
        begin = start + 1
    if first[-1] < 0:  # the root is the last start, used or not (a user of it then says no)
        first[-1] = begin
    v = len(operands)
    for names in reversed(operands):
        v -= 1
        at = first[v]
        if at < 0:
            return False
        for name in names:
            k = position(name, -1)
            if k >= at:  # not done yet: walked now, from here
                if first[k] >= 0:
                    return False
                first[k] = at
                at = k + 1
        if at != v:
            return False
    return True


_NAME = attrgetter("name")
_OPERANDS = attrgetter("operands")
_ATTRIBUTES = attrgetter("attributes")


def _control_predecessors(inst: Instruction) -> tuple[str, ...]:
    raw = inst.attributes.get("control-predecessors")
    if not raw:
        return ()
    body = raw.strip().strip("{}")
    return tuple(p.strip().lstrip("%") for p in body.split(",") if p.strip())
