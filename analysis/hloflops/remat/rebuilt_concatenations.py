"""Concatenations the recompute builds again, which the program without remat may build in place
(after optimization, TPU).

TPU lowers a concatenation one of two ways: as `-inf` pads of the pieces combined by `maximum`
(a `pad_maximum_fusion`, each piece widened to f32 for the maximum and the result narrowed back:
FLOPs), or as dynamic-update-slices of the pieces into one allocated buffer (no FLOPs). Which
one rests on the concatenation's readers and the buffers around it, not on its value. An LSTM's
gate kernel (the four gates' `[n, n]` weights concatenated into `[n, 4n]`) is such a
concatenation: the program with remat builds it in its forward and again, from the same
weights, in the recompute of each backward step (a remat-marked concatenation of the same
pieces' shape and paddings), whose loop it hands the weights narrowed one by one; the program
without remat's backward reads the one its forward built. There XLA may build that one in
place (TPU draw 53, a bidirectional LSTM: dynamic-update-slices in the program without remat,
pads and maximums in this one, maximum -786,432 and convert -1,572,864 against the truth), or
by pads alike (draws where both programs concatenate so, exact). So the forward's (top-level)
concatenation's ops, and the narrows of its pieces that only the recompute's loop reads, may be
remat: unsure, in the range only."""

from __future__ import annotations

from typing import Iterable

from hloflops.remat.sites import SiteOp
from hloparse.ir import CallRole, Computation, Instruction, Module

# What lies between a concatenation's pads and its maximums: widens and views.
_THROUGH = frozenset({"convert", "bitcast", "reshape", "copy"})


def rebuilt_concatenations(module: Module, ops: Iterable[SiteOp]) -> set[tuple[str, str]]:
    """(computation, name) of the ops of each top-level pad/maximum concatenation whose pieces'
    shape and paddings a remat-marked concatenation also builds, with the narrows of its pieces
    the concatenation itself does not read (module docstring)."""
    marked = {op.key[0] for op in ops if op.marked and op.inst.opcode == "maximum"}
    built: dict[str, tuple] = {}  # fused computation -> its concatenation's signature
    for comp in module.computations:
        signature = _concatenation(comp)
        if signature is not None:
            built[comp.name] = signature
    rebuilt = {built[name] for name in marked if name in built}
    if not rebuilt:
        return set()
    entry = module.entry
    found: set[tuple[str, str]] = set()
    for inst in entry.instructions:
        if inst.opcode != "fusion":
            continue
        for callee in inst.called(CallRole.FUSION):
            if built.get(callee) not in rebuilt or callee in marked:
                continue
            comp = module.by_name[callee]
            found |= {(callee, i.name) for i in comp.instructions if i.opcode in ("maximum", "convert")}
            pieces = set(inst.operands)
            found |= {(entry.name, i.name) for i in entry.instructions
                      if i.opcode == "convert" and i.operands and i.operands[0] in pieces
                      and all(user.opcode != "fusion" or callee not in user.called(CallRole.FUSION)
                              for user in entry.users.get(i.name, ()))}
    return found


def _concatenation(comp: Computation) -> tuple | None:
    """The signature (result dimensions, the pads' paddings) of a fused computation whose root
    is a maximum of `-inf` pads (through widens and a narrow): a concatenation; else None."""
    root = comp.root
    while root.opcode in _THROUGH and root.operands:
        root = comp.by_name[root.operands[0]]
    if root.opcode != "maximum":
        return None
    paddings: list[str] = []
    stack = [root]
    while stack:
        inst = stack.pop()
        if inst.opcode == "maximum":
            stack += [comp.by_name[name] for name in inst.operands]
            continue
        while inst.opcode in _THROUGH and inst.operands:
            inst = comp.by_name[inst.operands[0]]
        if inst.opcode != "pad" or not _pads_with_minus_inf(comp, inst):
            return None
        paddings.append(inst.attributes.get("padding", ""))
    return tuple(root.shape.dims), tuple(sorted(paddings))


def _pads_with_minus_inf(comp: Computation, pad: Instruction) -> bool:
    """Does the pad fill with a `-inf` constant?"""
    value = comp.by_name.get(pad.operands[1]) if len(pad.operands) > 1 else None
    return value is not None and value.opcode == "constant" and "-inf" in value.attributes.get("literal", "")

