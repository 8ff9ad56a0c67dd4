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
extra convert offsets this one). A named narrow is jax's cast, which the pairing decides.

TPU may also fuse the narrow alone (a `bitcast_convert_fusion` whose root converts the shard,
read only by the gather): the convert is then the fusion's, its shard the fusion's operand, and
which narrow came first is the order of the fusions in their caller. The same holds for the
checkpoint's input, not a weight only: the barrier hands the recompute another copy of `x`, which
the partitioner narrows and gathers again (held-out TPU draw 94, an FSDP `fori_loop` MLP: the
program without remat gathers `x` once for its forward and backward, this one twice; convert
-128 -> exact).

Under tensor parallelism the partitioner's windowed einsum (a loop passing the weight shard on with
collective-permutes, one step per device) reads the narrowed shard as a loop state element: each
of the forward's and the backward's windowed loops reads a narrow, and the backward's weight came
through the barrier. The program without remat narrows each shard once for both (held-out TPU
draw 123, an offloaded nnx MLP: five weights narrowed again for the backward's loops, convert
-10,048 out of range -> in range).

A fused narrow's value may also be an activation, a forward fusion's output: under tensor
parallelism the partitioner gathers a matmul's f32 output, narrowed, for the next matmul. CSE merges
the recompute's matmul into the forward's, but the recompute's gather is another collective and
reads a narrow of its own of that same value; the program without remat reads the forward's
gathered value once (TPU draws 266, 291, 340, tensor-parallel tanh: convert -1,792, -768, -512 out
of range -> in range)."""

from __future__ import annotations

from typing import Iterable

from hloflops.remat.regathered_windowed_einsums import GATHERS
from hloflops.remat.sites import SiteKey, SiteOp
from hloparse.ir import CallRole, Computation, Instruction, Module, parameter_number

# Ops that move or view a program input on the device unchanged (a prefetch, a relayout).
_MOVES = frozenset({"bitcast", "copy", "reshape", "transpose", "copy-start", "copy-done"})


def repeated_shard_narrows(module: Module, ops: Iterable[SiteOp]) -> set[SiteKey]:
    """The unnamed narrows of a weight shard, read only by gathers, that an earlier narrow of the
    same shard in their computation made already (see the module's docstring)."""
    found: set[SiteKey] = set()
    narrowed: dict[tuple[str, int], set[str]] = {}
    fused = _fusion_callers(module)
    # (caller computation, site) -> (position of the fusion in its caller, shard, the convert's key)
    fused_narrows: dict[tuple[str, int], list[tuple[int, str, SiteKey]]] = {}
    for op in ops:  # in schedule order within each computation
        inst = op.inst
        if inst.opcode != "convert" or op.op_name or not inst.operands:
            continue
        comp = module.by_name[op.key[0]]
        shard = _shard(module, comp, inst)
        if shard is not None:
            seen = narrowed.setdefault((op.key[0], op.key[2]), set())
            if shard in seen:
                found.add(op.key)
            seen.add(shard)
            continue
        caller = fused.get(op.key[0])
        if caller is not None and comp.root is inst:
            shard = _fused_shard(module, comp, inst, *caller)
            if shard is not None:
                fused_narrows.setdefault((caller[0].name, op.key[2]), []).append((caller[2], shard, op.key))
    for narrows in fused_narrows.values():  # a fusion's narrow: the first by its caller's schedule is the forward's
        seen = set()
        for _, shard, key in sorted(narrows, key=lambda n: n[0]):
            if shard in seen:
                found.add(key)
            seen.add(shard)
    return found


def _fusion_callers(module: Module) -> dict[str, tuple[Computation, Instruction, int]]:
    """Each fused computation called by one fusion: its caller computation, the fusion and its
    position there (the schedule's order in a scheduled module)."""
    callers: dict[str, list[tuple[Computation, Instruction, int]]] = {}
    for comp in module.computations:
        for position, inst in enumerate(comp.instructions):
            if inst.opcode == "fusion":
                for name in inst.called(CallRole.FUSION):
                    callers.setdefault(name, []).append((comp, inst, position))
    return {name: sites[0] for name, sites in callers.items() if len(sites) == 1}


def _fused_shard(module: Module, comp: Computation, inst: Instruction, caller: Computation,
                 fusion: Instruction, _: int) -> str | None:
    """The program input a fusion's root convert narrows (through views inside the fusion, then
    moves in its caller), where the fusion is read only by gathers; else None."""
    readers = caller.users.get(fusion.name, ())
    if not readers or not all(_gathers(module, caller, reader) for reader in readers):
        return None
    source = comp.by_name.get(inst.operands[0])
    if source is None or not _narrows(source, inst):
        return None
    for _ in range(64):  # inside the fusion: views of one of its parameters
        if source.opcode == "parameter":
            break
        if source.opcode not in _MOVES or not source.operands:
            return None
        source = comp.by_name.get(source.operands[0])
        if source is None:
            return None
    else:
        return None
    index = parameter_number(source)
    if index >= len(fusion.operands):
        return None
    outer = caller.by_name.get(fusion.operands[index])
    for _ in range(64):
        if outer is None:
            return None
        if outer.opcode in ("parameter", "fusion"):  # a program input, or an activation (z6, below)
            return outer.name
        if outer.opcode not in _MOVES or not outer.operands:
            return None
        outer = caller.by_name.get(outer.operands[0])
    return None


def _shard(module: Module, comp: Computation, inst: Instruction) -> str | None:
    """The program input (a parameter) the convert narrows, through moves and views, where it is
    narrowed to be gathered; else None."""
    readers = comp.users.get(inst.name, ())
    if not readers or not all(_gathers(module, comp, reader) for reader in readers):
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


def _gathers(module: Module, comp: Computation, reader: Instruction) -> bool:
    """Does the reader gather its operand (an all-gather, or TPU's fusion starting an async one,
    or the state tuple of a windowed einsum's loop, which passes the shard around)?"""
    if reader.opcode in GATHERS:
        return True
    if reader.opcode == "tuple":
        return _windowed_loop_state(module, comp, reader)
    if reader.opcode != "fusion":
        return False
    return any(inst.opcode in GATHERS for name in reader.called(CallRole.FUSION)
               for inst in getattr(module.by_name.get(name), "instructions", ()))


def _windowed_loop_state(module: Module, comp: Computation, state: Instruction) -> bool:
    """Is the tuple read only by while loops whose body moves data between devices (a windowed
    einsum: the partitioner's loop passing a weight shard on with collective-permutes)?"""
    readers = comp.users.get(state.name, ())
    return bool(readers) and all(reader.opcode == "while" and any(
        _passes_shards(module, module.by_name[body], 3) for body in reader.called(CallRole.WHILE_BODY))
        for reader in readers)


def _passes_shards(module: Module, comp: Computation, depth: int) -> bool:
    """Does the computation (or one it calls, `depth` levels down) hold a collective-permute or a
    gather?"""
    for inst in comp.instructions:
        if inst.opcode.startswith("collective-permute") or inst.opcode in GATHERS:
            return True
        if depth and any(_passes_shards(module, module.by_name[name], depth - 1)
                         for role in (CallRole.FUSION, CallRole.CALL, CallRole.ASYNC, CallRole.BRANCH)
                         for name in inst.called(role) if name in module.by_name):
            return True
    return False


def _narrows(source: Instruction, inst: Instruction) -> bool:
    """Is the convert a float narrowing (f32 to bf16)?"""
    wide = str(source.shape.element_type).lower()
    narrow = str(inst.shape.element_type).lower()
    return wide == "f32" and narrow in ("bf16", "f16")
