"""Elementwise ops left on the broadcast side of a checkpoint's optimization barrier (after
optimization): remat FLOPs in part.

XLA's algebraic simplifier moves a broadcast below an elementwise op whose operands are all that
broadcast's kind (`op(broadcast(x)) -> broadcast(op(x))`, `TryToSinkBroadcastAfterOpWith
UniqueNonScalarOperand`): the op then runs on the broadcast's operand, not on its result. It
cannot where an optimization barrier stands between them when it runs. jax puts one on what a
checkpoint's backward reads (`prevent_cse`), the cotangent included: a mean pool's cotangent
`broadcast(g / n)`, bf16, goes into the checkpointed conv stack's backward through it, and each
fusion there widens the broadcast `[b, h, w, c]` to f32 (`convert(broadcast(p))`), where the
program without remat widens `[b, c]` and broadcasts the f32 (more draws 10, 30, 77, 103: convert
-65,280 a fusion, 4 * (65,536 - 256) on draw 30). The op's FLOPs beyond those on the broadcast's
operand run because of remat: a share (result elements - operand elements) / result elements of
its row (`Row.remat_part`).

Such an op is found only after optimization, in a module with remat names, on an elementwise op
whose every operand is a broadcast of one non-scalar operand shape with the same dimensions, or a
scalar (a constant, or a broadcast of one): what the simplifier would have sunk. No CPU program
without remat of the generated draws (base, more) holds one. Not on TPU: its compiler widens bf16
after a broadcast in programs without remat too (a conv's bias add, `convert(broadcast(b))` in
TPU draws 18, 32, 36), so the op says nothing of a barrier there (pairing.py asks
`is_tpu_module`). GPU's pipeline is not checked.
"""

from __future__ import annotations

from math import prod
from typing import Iterable

from hloflops.cost.shapes import elements
from hloflops.remat.op_kinds import DUPLICATED
from hloflops.remat.sites import Key
from hloparse.ir import Computation, Instruction

# The elementwise ops the simplifier sinks a broadcast below (those with FLOPs: the rest cost nothing).
SINKABLE = DUPLICATED


def unsunk_broadcasts(computations: Iterable[Computation]) -> dict[Key, tuple[int, int]]:
    """(computation, name) of each elementwise op applied to a broadcast the simplifier would have
    sunk below it -> the share of its FLOPs that runs because of remat: (result elements -
    operand elements, result elements)."""
    found: dict[Key, tuple[int, int]] = {}
    for comp in computations:
        if not any(inst.opcode == "broadcast" for inst in comp.instructions):
            continue
        for inst in comp.instructions:
            if inst.opcode not in SINKABLE or not inst.operands or not inst.shape.is_array:
                continue
            small = _sunk_operand(comp, inst)
            if small is not None:
                whole = elements(inst.shape)
                if 0 < small < whole:
                    found[(comp.name, inst.name)] = (whole - small, whole)
    return found


def _sunk_operand(comp: Computation, inst: Instruction) -> int | None:
    """The elements of the one non-scalar shape the op's operands broadcast, where each operand is
    a broadcast of that shape along the same dimensions or a scalar; else None."""
    kind = None
    for k in range(len(inst.operands)):
        operand = comp.by_name.get(inst.operands[k])
        if operand is None:
            return None
        if operand.opcode == "constant" and operand.shape.rank == 0:
            continue
        if operand.opcode != "broadcast" or not operand.operands:
            return None
        source = comp.by_name.get(operand.operands[0])
        if source is None:
            return None
        if source.shape.rank == 0:
            continue  # a scalar's broadcast: sinks with any other
        this = (source.shape.dims, operand.dimensions)
        if kind is not None and this != kind:
            return None
        kind = this
    return None if kind is None else prod(kind[0])
