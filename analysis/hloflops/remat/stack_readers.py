"""Who reads a residual a loop stores into its stack: the ops of the other loops that read a slice of
it (hloflops.remat.rounding asks whether the backward loop reads a policy's saved residual itself,
or only its recompute does).

A scan's forward loop writes each residual into a stack carried in its state (a fusion holding a
dynamic-update-slice, at some index of the body's root tuple); the stack leaves the loop as an
element of its result, goes into another loop's initial state (a tuple operand of that `while`),
and that loop's body reads a slice of it (a `get-tuple-element` of its parameter, a
dynamic-slice, often inside a fusion)."""

from __future__ import annotations

from typing import Iterator

from hloparse.ir import CallRole, Computation, Instruction, Module

# Ops that only hand a value on (a slice of a stack is the stack's value here).
_HANDS_ON = frozenset({"bitcast", "reshape", "copy", "dynamic-slice", "slice", "broadcast", "transpose"})


def stack_readers(module: Module, frame: str, writer: str) -> list[tuple[str, Instruction]] | None:
    """The first ops (computation, instruction) that compute from the stack the instruction `writer`
    of loop body `frame` writes, in the bodies of other loops (through fusions, views and slices).
    None where the stack cannot be followed (not in the body's root tuple, no such loop)."""
    body = module.by_name.get(frame)
    if body is None:
        return None
    positions = _tuple_positions(body, writer)
    if not positions:
        return None
    loops = [(comp, inst) for comp, inst in module.instructions()
             if inst.opcode == "while" and frame in inst.called(CallRole.WHILE_BODY)]
    if not loops:
        return None
    found: list[tuple[str, Instruction]] = []
    for comp, loop in loops:
        for index in positions:
            for user in _elements(comp, loop.name, index):
                for other_body, element in _into_other_loops(module, comp, user, frame):
                    found += _first_readers(module, module.by_name[other_body], element)[0]
    return found


def _tuple_positions(body: Computation, name: str) -> list[int]:
    """Where the body's root tuple holds `name` (through views)."""
    users = body.users
    out, pending, seen = [], [name], set()
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        for user in users.get(current, ()):
            if user is body.root and user.opcode == "tuple":
                out += [i for i, o in enumerate(user.operands) if o == current]
            elif user.opcode in ("bitcast", "copy", "reshape"):
                pending.append(user.name)
    return out


def _elements(comp: Computation, tuple_name: str, index: int) -> list[str]:
    """The instructions holding element `index` of a tuple-shaped value (get-tuple-element, through
    copies and views)."""
    users = comp.users
    out, pending = [], [u.name for u in users.get(tuple_name, ())
                        if u.opcode == "get-tuple-element" and u.attributes.get("index") == str(index)]
    seen = set()
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        out.append(current)
        pending += [u.name for u in users.get(current, ()) if u.opcode in ("bitcast", "copy", "reshape")]
    return out


def _into_other_loops(module: Module, comp: Computation, name: str, frame: str) -> Iterator[tuple[str, str]]:
    """For each loop (not the writer's) whose initial state tuple holds `name`: its body and the
    body's get-tuple-elements of that position."""
    for user in comp.users.get(name, ()):
        if user.opcode != "tuple":
            continue
        for loop in comp.users.get(user.name, ()):
            if loop.opcode != "while":
                continue
            for body_name in loop.called(CallRole.WHILE_BODY):
                if body_name == frame or body_name not in module.by_name:
                    continue
                body = module.by_name[body_name]
                params = [i for i in body.instructions if i.opcode == "parameter"]
                for index, operand in enumerate(user.operands):
                    if operand != name:
                        continue
                    for param in params:
                        for element in _elements(body, param.name, index):
                            yield body_name, element


def _first_readers(module: Module, comp: Computation, name: str, depth: int = 0
                   ) -> tuple[list[tuple[str, Instruction]], bool]:
    """The ops of `comp` (and of the fusions it calls) that compute from `name`, past the ops that
    hand it on, and whether `comp` hands it out (its root, in a fusion: the fusion's readers read
    it); the loop's own pass-through (its root tuple) is no reader."""
    users = comp.users
    out, pending, seen = [], [name], set()
    handed_out = name == comp.root.name
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        for user in users.get(current, ()):
            if user is comp.root and user.opcode == "tuple":
                continue
            if user.opcode in _HANDS_ON or user.opcode == "get-tuple-element":
                pending.append(user.name)
                handed_out |= user is comp.root
            elif user.opcode == "fusion" and depth < 4:
                for callee in user.called(CallRole.FUSION):
                    fused = module.by_name.get(callee)
                    if fused is None:
                        continue
                    params = {int(p.attributes.get("parameter_number", "0")): p for p in fused.instructions
                              if p.opcode == "parameter"}
                    for i, operand in enumerate(user.operands):
                        if operand == current and i in params:
                            inside, out_again = _first_readers(module, fused, params[i].name, depth + 1)
                            out += inside
                            if out_again:
                                pending.append(user.name)
            else:
                out.append((comp.name, user))
    return out, handed_out
