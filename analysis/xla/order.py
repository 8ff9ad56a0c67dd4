"""The order in which XLA's cost analysis visits a computation's instructions: its float32 sums
are added up in this order, so a different order can give a different float32 total."""

from __future__ import annotations

from hloparse.ir import Computation, Instruction


def visit_order(computation: Computation) -> list[Instruction]:
    """HloComputation::Accept's order: each unreachable root (an instruction nobody uses that
    is not the root), then the root, each in post-order DFS with operands left to right."""
    instructions = computation.instructions
    return [instructions[i] for i in visit_positions(computation)]


def visit_positions(computation: Computation) -> list[int]:
    """`visit_order` as positions in `computation.instructions`."""
    instructions = computation.instructions
    position = {inst.name: i for i, inst in enumerate(instructions)}
    children: list[list[int]] = []
    used = bytearray(len(instructions))
    for inst in instructions:
        kids = [position[o] for o in inst.operands if o in position]
        if "control-predecessors" in inst.attributes:
            kids += [position[p] for p in _control_predecessors(inst) if p in position]
        for k in kids:
            used[k] = 1
        children.append(kids)
    root = position.get(computation.root.name, len(instructions) - 1)
    starts = [i for i in range(len(instructions)) if not used[i] and i != root] + [root]
    state = bytearray(len(instructions))  # 0: not seen, 1: expanding, 2: done
    order: list[int] = []
    for start in starts:
        if state[start]:
            continue
        stack = [start]
        while stack:
            i = stack[-1]
            if state[i] == 0:  # first time on top: expand it, it stays below its operands
                state[i] = 1
                for k in reversed(children[i]):
                    if state[k] == 0:
                        stack.append(k)
                continue
            stack.pop()
            if state[i] == 1:  # back on top after its operands: done (a second entry is skipped)
                state[i] = 2
                order.append(i)
    return order


def _control_predecessors(inst: Instruction) -> tuple[str, ...]:
    raw = inst.attributes.get("control-predecessors")
    if not raw:
        return ()
    body = raw.strip().strip("{}")
    return tuple(p.strip().lstrip("%") for p in body.split(",") if p.strip())
