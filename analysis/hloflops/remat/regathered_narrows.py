"""A weight shard narrowed again before the recompute's gather (after optimization, TPU).

Under FSDP, TPU narrows a bf16 matmul's weight shard before gathering it (an unnamed `convert`
of the program input, read by the all-gather or its async start), halving what the gather moves.
jax's checkpoint reads its weights through the barrier on the recompute's inputs, so the
recompute's (and its backward's) weight is another value: the partitioner gathers it again, and CSE
cannot merge that narrow with the forward's (hloflops.remat.collectives: the all-reduce gathers of
small weights, the same way). The program without remat narrows each shard once, every gather of
the weight reading that one narrow (TPU 0-59: no shard narrowed twice there). So a narrow of a
shard an earlier narrow of the computation (by schedule) already made runs because of remat:
TPU draws 52 and 55 (convert -1,024 and -16,384 before), 27 (wo narrowed for a gather in another
layout). Unsure: which gathers XLA reads one narrow from rests on how it scheduled both programs,
and the program without remat may copy other converts more often (TPU draw 8, where the twin's
extra convert offsets this one). A named narrow is jax's cast, which the pairing decides."""

from __future__ import annotations

from typing import Iterable

from hloflops.remat.sites import SiteKey, SiteOp
from hloparse.ir import CallRole, Computation, Instruction, Module

# Ops that move or view a program input on the device unchanged (a prefetch, a relayout).
_MOVES = frozenset({"bitcast", "copy", "reshape", "transpose", "copy-start", "copy-done"})
# What gathers a narrowed shard (TPU's async collective starts it in a fusion of its own).
_GATHERS = frozenset({"all-gather", "all-gather-start"})


def repeated_shard_narrows(module: Module, ops: Iterable[SiteOp]) -> set[SiteKey]:
    """The unnamed narrows of a weight shard, read only by gathers, that an earlier narrow of the
    same shard in their computation made already (see the module's docstring)."""
    found: set[SiteKey] = set()
    narrowed: dict[tuple[str, int], set[str]] = {}
    for op in ops:  # in schedule order within each computation
        inst = op.inst
        if inst.opcode != "convert" or op.op_name or not inst.operands:
            continue
        comp = module.by_name[op.key[0]]
        shard = _shard(module, comp, inst)
        if shard is None:
            continue
        seen = narrowed.setdefault((op.key[0], op.key[2]), set())
        if shard in seen:
            found.add(op.key)
        seen.add(shard)
    return found


def _shard(module: Module, comp: Computation, inst: Instruction) -> str | None:
    """The program input (a parameter) the convert narrows, through moves and views, where it is
    narrowed to be gathered; else None."""
    readers = comp.users.get(inst.name, ())
    if not readers or not all(_gathers(module, reader) for reader in readers):
        return None
    source = comp.by_name.get(inst.operands[0])
    if source is None or not _narrows(source, inst):
        return None
    for _ in range(64):
        if source.opcode == "parameter":
            return source.name
        if source.opcode not in _MOVES or not source.operands:
            return None
        source = comp.by_name.get(source.operands[0])
        if source is None:
            return None
    return None


def _gathers(module: Module, reader: Instruction) -> bool:
    """Does the reader gather its operand (an all-gather, or TPU's fusion starting an async one)?"""
    if reader.opcode in _GATHERS:
        return True
    if reader.opcode != "fusion":
        return False
    return any(inst.opcode in _GATHERS for name in reader.called(CallRole.FUSION)
               for inst in getattr(module.by_name.get(name), "instructions", ()))


def _narrows(source: Instruction, inst: Instruction) -> bool:
    """Is the convert a float narrowing (f32 to bf16)?"""
    wide = str(source.shape.element_type).lower()
    narrow = str(inst.shape.element_type).lower()
    return wide == "f32" and narrow in ("bf16", "f16")
