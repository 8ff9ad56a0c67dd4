"""Bytes a fusion instruction moves across its boundary, by XLA's rules (HandleFusion).

XLA ignores every byte inside a fused computation and charges, in this order:
1. each array subshape of the fusion's result (for a result computed by an in-place
   dynamic-update-slice, only the update's size);
2. each fused constant with more than one element, once;
3. each fused parameter, by how its users read it (`parameter_read_bytes`).
The terms are returned in that order because XLA adds them to a float running sum.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hloflops.cost.shapes import array_subshapes, elements, size
from hloparse.ir import CallRole, Computation, Instruction, Module, parameter_number


def boundary_terms(module: Module, fusion: Instruction, body: Computation) -> list[int]:
    terms = output_terms(body, fusion)
    params = []  # body.parameters, gathered in the constants' pass (a second pass per body cost ~10%)
    for inst in body.instructions:
        opcode = inst.opcode
        if opcode == "parameter":
            params.append(inst)
        elif opcode == "constant" and elements(inst.shape) > 1:
            terms.append(size(inst.shape, packed=False))  # a constant's shape is never packed
    if len(params) > 1:
        params.sort(key=parameter_number)
    users = _parameter_users(body, params)
    if users is None:
        users = body.users
    for param in params:
        terms.append(parameter_bytes(module, body, param, users))
    return terms


def _parameter_users(body: Computation, params: list[Instruction]) -> dict[str, list[Instruction]] | None:
    """The users of each parameter (in text order, each once), or None when a parameter is a
    tuple or feeds a nested fusion (those walks need other users too). Exists because building
    `body.users` for every instruction of every fusion body was ~0.2 s of a 28.8 MB module."""
    wanted = {p.name: [] for p in params}
    if any(p.shape.is_tuple for p in params):
        return None
    names = wanted.keys()
    for inst in body.instructions:
        ops = inst.operands
        if names.isdisjoint(ops):
            continue
        if inst.opcode == "fusion":
            return None
        for op in ops:
            found = wanted.get(op)
            if found is not None and not (found and found[-1] is inst):
                found.append(inst)
    return wanted


def output_terms(body: Computation, fusion: Instruction) -> list[int]:
    root = body.root
    terms = []
    for index, subshape in array_subshapes(fusion.shape):
        producer = root
        if len(index) == 1 and root.opcode == "tuple":
            producer = body.by_name[root.operands[index[0]]]
        if producer.opcode == "dynamic-update-slice":
            update = body.by_name[producer.operands[1]]  # in place: only the update is written
            terms.append(size(update.shape, packed=update.opcode != "constant"))
        else:
            terms.append(size(subshape))
    return terms


def parameter_bytes(
    module: Module, body: Computation, param: Instruction, users: Mapping[str, Sequence[Instruction]] | None = None
) -> int:
    """Bytes read through one fused parameter; a tuple parameter is read leaf by leaf through
    its get-tuple-element chain."""
    if not param.shape.is_tuple:
        return parameter_read_bytes(module, body, param, users)
    return sum(parameter_bytes_at(module, body, param, index) for index, _ in param.shape.leaves_with_index())


def parameter_bytes_at(module: Module, body: Computation, param: Instruction, index: tuple[int, ...]) -> int:
    """Bytes read through one leaf of a tuple parameter: follow the get-tuple-element chain to
    that leaf (as far as it exists) and read it like a parameter."""
    node = param
    for sub in index:
        for user in body.users.get(node.name, ()):
            if user.opcode == "get-tuple-element" and int(user.attributes.get("index", "-1")) == sub:
                node = user
                break
    return parameter_read_bytes(module, body, node)


def parameter_read_bytes(
    module: Module, body: Computation, node: Instruction, users: Mapping[str, Sequence[Instruction]] | None = None
) -> int:
    """XLA's FusionParameterReadBytes: walk the direct users of a fused parameter (or GTE).

    Slices read their output size each; a dynamic-slice of the parameter reads its output size;
    broadcasts and reshapes read the whole parameter each time; every other user (and an index
    operand of a dynamic-(update-)slice) shares one whole read; the buffer a dynamic-update-slice
    updates in place is not read at all. A nested fusion is looked through (see `_nested`).
    """
    total = 0
    seen = False
    for user in (body.users if users is None else users).get(node.name, ()):
        op = user.opcode
        if op == "fusion":
            total += _nested(module, body, node, user)
        elif op == "slice":
            total += size(user.shape)
        elif op == "dynamic-slice":
            if user.operands[0] == node.name:
                total += size(user.shape)
            elif not seen:
                seen = True
                total += size(node.shape)
        elif op == "dynamic-update-slice":
            if user.operands[0] != node.name and not seen:
                seen = True
                total += size(node.shape)
        elif op in ("broadcast", "reshape"):
            total += size(node.shape)
        elif not seen:
            seen = True
            total += size(node.shape)
    return total


def _nested(module: Module, body: Computation, node: Instruction, fusion: Instruction) -> int:
    """A parameter read by a nested fusion: when the nested fusion just passes that parameter
    to its root's first operand ("simple"), the nested fusion's own users decide (slices,
    dynamic-(update-)slices); otherwise the nested body's parameter is read once."""
    inner = module.computation(fusion.called(CallRole.FUSION)[0])
    root = inner.root
    params = inner.parameters
    total = 0
    for idx, operand in enumerate(fusion.operands):
        if operand != node.name:
            continue
        inner_param = params[idx]
        simple = not root.operands or root.operands[0] == inner_param.name
        seen = False
        for fusion_user in body.users.get(fusion.name, ()):
            op = fusion_user.opcode
            if simple and op == "slice":
                total += size(fusion_user.shape)
            elif simple and op == "dynamic-slice":
                if fusion_user.operands[0] == fusion.name:
                    total += size(fusion_user.shape)
                elif not seen:
                    seen = True
                    total += size(fusion.shape)
            elif simple and op == "dynamic-update-slice":
                if fusion_user.operands[0] != fusion.name and not seen:
                    seen = True
                    total += size(fusion.shape)
            elif not seen:
                seen = True
                total += parameter_read_bytes(module, inner, inner_param)
    return total
