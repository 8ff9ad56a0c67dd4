"""Collectives of recomputed values (sharded programs; hloflops.remat.pairing calls
`collectives_of_recomputes` once every other rule has decided).

Under tensor parallelism a matmul that contracts a sharded dimension computes partial sums that an
`all-reduce` completes; a layer norm's sums over a sharded feature dimension too. A recompute runs
the layer's forward again, so it runs these all-reduces again: their operand is the recompute's
partial sums. Their own value often matches nothing: XLA's combiner merges the forward's
all-reduces into one variadic instruction with other (backward) ones, whose value is not that of
the recompute's single all-reduce (TPU seeds 2 and 24: the attention scores' and the layer norms'
all-reduces), or the forward computed the value under another sharding (all-to-all of the weight,
no partial sums). What the collective reduces is the recompute's value, and the program without
remat has no second copy of it to reduce: a remat-marked all-reduce or reduce-scatter whose every
operand is recompute is recompute, as sure as its operands (`weak` where one of them is).

A variadic collective only some of whose operands are recompute (the combiner put a recompute's
all-reduce with the forward's or the backward's) is the all-reduces it merged, each of one operand:
the recompute's run because of remat, the others' run in the program without remat too. An
all-reduce's FLOPs are one add per element of each operand, so the share of its FLOPs that is remat
is its recomputed operands' elements over all its operands' (`Row.remat_part`; TPU draw 6, a
whole-model checkpoint under FSDP: the combiner put the recomputed attention output's and MLP
output's partial sums, and the recomputed second layer norm's sums, with forward all-reduces,
all-reduce -132,096 before). As sure as those operands. A collective whose operands are the
forward's own values is never touched: the rule reads only what the other rules found recompute,
and the program without remat has none.

Under FSDP, TPU gathers a small weight (a bias, a layer norm's scale) with an all-reduce: each
device writes its shard into zeros at its offset (`dynamic-update-slice(broadcast(0), shard, o)`)
and the sum is the whole weight. jax's checkpoint reads its weights through the barrier on the
recompute's inputs, so the partitioner gathers them again for the recompute, and CSE cannot merge
that gather with the forward's; the program without remat gathers each weight once, its backward
reading the forward's gathered copy. So an all-reduce that gathers again a shard an earlier one in
its computation (by schedule) gathered, where a recompute reads one of its results, runs those
elements because of remat (the combiner merges the recompute's gathers with the backward's, which
read the same barrier's weights: TPU draw 55, all-reduce -1,536 before): the share of its
elements that are gathered again, sure. The same shard is gathered again within one variadic
all-reduce too (the combiner merged the forward's gather with the recompute's: xtpu 363), where a
loop fusion wrote it into zeros (wtpu 353), and where each gather casts it itself (utpu 186); no
cached TPU program without remat (draws 0-419) gathers a shard twice.
"""

from __future__ import annotations

import math
from typing import Iterable

from hloparse.ir import CallRole, Computation, Instruction, Module
from hloflops.remat.op_kinds import LAYOUT_VIEWS
from hloflops.remat.sites import Key, SiteKey


# Collectives that compute: a reduction of their operands across devices (an async all-reduce's
# start holds its reduction). An all-gather or all-to-all computes nothing, and what it moves says
# less: a backward op reading a recompute gathers it where the program without remat gathers the
# forward's value.
REDUCING = frozenset({"all-reduce", "all-reduce-start", "reduce-scatter"})
# Ops that hand their operand's value on unchanged (a layout, a shape).
_PASSING = frozenset({"bitcast", "copy", "reshape"})
# Ops that move a weight's shard on the device unchanged before a read (a prefetch's copies, views).
_MOVES = _PASSING | {"copy-start", "copy-done"}
# Ops that hand a gathered weight on to its readers (an element of a variadic gather, a broadcast).
_HANDING_ON = LAYOUT_VIEWS | {"get-tuple-element", "broadcast"}


def collectives_of_recomputes(module: Module, ops: Iterable[tuple[SiteKey, Instruction, bool]], remat: set[SiteKey],
                              sure: set[SiteKey]) -> tuple[set[SiteKey], set[SiteKey], dict[SiteKey, tuple[int, int]]]:
    """Of `ops` (site key, instruction, remat-marked), the collectives that reduce recomputes (those
    of an instruction in `remat` at each of its call sites): the marked ones whose every operand is
    one, those of the found and the shared whose recomputed operands are all in `sure` too, and the
    variadic ones only partly of recomputes with the share of their FLOPs that is remat
    (recomputed elements, all elements)."""
    ops = list(ops)
    flags: dict[Key, list[bool]] = {}
    for key, _, _ in ops:
        flags.setdefault(key[:2], []).append(key in remat)
    recompute = {key for key, at in flags.items() if all(at)}
    sure_keys = {key[:2] for key in sure}
    found: set[SiteKey] = set()
    certain: set[SiteKey] = set()
    shares: dict[SiteKey, tuple[int, int]] = {}
    for key, inst, marked in ops:
        if inst.opcode not in REDUCING or key in remat or not inst.operands:
            continue
        comp = module.by_name[key[0]]
        sources = [_source(module, comp, name) for name in inst.operands]
        recomputed = [s in recompute for s in sources]
        if not any(recomputed):
            continue
        if all(recomputed) and marked:
            found.add(key)
        else:
            sizes = [_elements(comp, name) for name in inst.operands]
            if None in sizes:
                continue
            part = sum(n for n, at in zip(sizes, recomputed) if at)
            if part == sum(sizes):  # every element (an unmarked collective of recomputes alone)
                found.add(key)
            elif part:
                shares[key] = (part, sum(sizes))
            else:
                continue
        if all(s in sure_keys for s, at in zip(sources, recomputed) if at):
            certain.add(key)
    for key, part, total in repeated_gathers(module, ops, remat):
        if key in found or key in shares:
            continue
        if part == total:
            found.add(key)
        else:
            shares[key] = (part, total)
        certain.add(key)
    return found, certain, shares


def repeated_gathers(module: Module, ops: list[tuple[SiteKey, Instruction, bool]], remat: set[SiteKey]
                     ) -> list[tuple[SiteKey, int, int]]:
    """The all-reduces that gather again (see the module's docstring) a weight shard an earlier one
    of their computation gathered, where one of their results is read by a recompute: each with its
    elements gathered again and all its elements."""
    recomputing = {key[0] for key in remat}  # computations holding a recompute (fused ones too)
    found: list[tuple[SiteKey, int, int]] = []
    gathered: dict[tuple[str, int], set[str]] = {}  # (computation, site) -> shards gathered so far
    for key, inst, _ in ops:  # in schedule order within each computation
        if inst.opcode not in ("all-reduce", "all-reduce-start") or not inst.operands:
            continue
        comp = module.by_name[key[0]]
        shards = [_gathered_shard(module, comp, name) for name in inst.operands]
        if not any(shards):
            continue
        seen = gathered.setdefault((key[0], key[2]), set())
        again = []
        for shard in shards:  # one variadic all-reduce may gather a shard twice (the combiner merged both)
            again.append(shard is not None and shard in seen)
            if shard is not None:
                seen.add(shard)
        if not any(again) or not _read_by_a_recompute(module, comp, inst, remat, recomputing, key[2]):
            continue
        sizes = [_elements(comp, name) for name in inst.operands]
        if None in sizes:
            continue
        found.append((key, sum(n for n, at in zip(sizes, again) if at), sum(sizes)))
    return found


def _gathered_shard(module: Module, comp: Computation, name: str) -> str | None:
    """The shard an all-reduce operand gathers, where it is one (a shard written into zeros at the
    device's offset), through the moves and views that hand it on; else None. The write may be a
    loop fusion's root, its zeros and shard the fusion's operands (wtpu 353: the forward's gather
    fused its shard's bitcast with the write, the recompute's gather of that shard did not)."""
    inst = comp.by_name.get(name)
    if inst is None:
        return None
    if inst.opcode == "fusion":
        written = _fused_write(module, inst)
    elif inst.opcode == "dynamic-update-slice" and len(inst.operands) >= 2:
        written = inst.operands[0], inst.operands[1]
    else:
        written = None
    if written is None or not is_zero_broadcast(comp, written[0]):
        return None
    # A cast of the shard is the same value wherever it is computed (a bf16 program gathers its
    # weights' bf16 casts, each gather its own convert, fused or not: utpu 186): the shard is its
    # source with the element types it is cast to.
    name, casts = written[1], ""
    for _ in range(64):
        inst = comp.by_name.get(name)
        if inst is None or not inst.operands:
            return name + casts
        if inst.opcode == "convert":
            casts = ":" + inst.shape.element_type + casts
        elif inst.opcode == "fusion" and (cast := _fused_cast(module, inst)) is not None:
            casts = cast + casts
        elif inst.opcode not in _MOVES:
            return name + casts
        name = inst.operands[0]
    return None


def _fused_cast(module: Module, fusion: Instruction) -> str | None:
    """Where a fusion of one operand only views and casts it: the element types it casts to (each
    after a ':', outermost last; '' for none); else None."""
    callee = _callee(module, fusion)
    if len(fusion.operands) != 1 or callee is None or not callee.instructions:
        return None
    casts, inst = "", callee.root
    for _ in range(64):
        if inst is None:
            return None
        if inst.opcode == "parameter":
            return casts
        if inst.opcode == "convert":
            casts = ":" + inst.shape.element_type + casts
        elif inst.opcode not in _PASSING:
            return None
        inst = callee.by_name.get(inst.operands[0]) if inst.operands else None
    return None


def _fused_write(module: Module, fusion: Instruction) -> tuple[str, str] | None:
    """Where a fusion's root writes a value into another at an offset, both of them (through views)
    the fusion's operands: the names of those two operands in the computation around it; else None."""
    callee = _callee(module, fusion)
    if callee is None or not callee.instructions or callee.root.opcode != "dynamic-update-slice" \
            or len(callee.root.operands) < 2:
        return None
    outer: list[str] = []
    for name in callee.root.operands[:2]:
        inst = callee.by_name.get(name)
        while inst is not None and inst.opcode in _PASSING and inst.operands:
            inst = callee.by_name.get(inst.operands[0])
        if inst is None or inst.opcode != "parameter":
            return None
        number = int(inst.attributes.get("parameter_number", "-1"))
        if not 0 <= number < len(fusion.operands):
            return None
        outer.append(fusion.operands[number])
    return outer[0], outer[1]


def is_zero_broadcast(comp: Computation, name: str) -> bool:
    """Is the value a broadcast of the constant zero?"""
    inst = comp.by_name.get(name)
    while inst is not None and inst.opcode == "broadcast" and inst.operands:
        inst = comp.by_name.get(inst.operands[0])
    return inst is not None and inst.opcode == "constant" and \
        inst.attributes.get("literal", "").strip("{} ") in ("0", "0.0", "-0")


def _read_by_a_recompute(module: Module, comp: Computation, inst: Instruction, remat: set[SiteKey],
                         recomputing: set[str], site: int) -> bool:
    """Does a recompute read one of the collective's results (unfused, or in its fusion), through
    the elements and views of them and the broadcasts that hand them on?"""
    readers: list[Instruction] = []
    todo = list(comp.users.get(inst.name, ()))
    while todo and len(readers) < 256:
        reader = todo.pop()
        readers.append(reader)
        if reader.opcode in _HANDING_ON:
            todo += comp.users.get(reader.name, ())
    return any((comp.name, reader.name, site) in remat
               or (reader.opcode == "fusion" and _fuses_a_recompute(module, reader, recomputing))
               for reader in readers)


def _fuses_a_recompute(module: Module, fusion: Instruction, recomputing: set[str]) -> bool:
    """Does the fusion hold a recompute, in its own computation or in a fusion nested in it (an
    async collective fusion nests the recompute's loop fusion that reads the gathered weight: ntpu
    132, hk_loop under FSDP, all-reduce -64 before)?"""
    todo = list(fusion.called(CallRole.FUSION))
    seen: set[str] = set()
    while todo and len(seen) < 64:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in recomputing:
            return True
        callee = module.by_name.get(name)
        if callee is not None:
            todo += [c for inst in callee.instructions if inst.opcode == "fusion" for c in inst.called(CallRole.FUSION)]
    return False


def _elements(comp: Computation, name: str) -> int | None:
    """The elements of an array operand (None for a tuple or an operand out of sight)."""
    inst = comp.by_name.get(name)
    if inst is None or inst.shape.is_tuple:
        return None
    return math.prod(inst.shape.dims)


def _source(module: Module, comp: Computation, name: str) -> Key | None:
    """The op that computes the value `name` hands on: through bitcasts, copies and reshapes, into
    a fusion to its root (the element a get-tuple-element takes of a multi-output fusion)."""
    index: int | None = None
    for _ in range(64):  # a chain of views is short; never loop on a malformed module
        inst = comp.by_name.get(name)
        if inst is None:
            return None
        if inst.opcode in _PASSING and len(inst.operands) == 1 and index is None:
            name = inst.operands[0]
        elif inst.opcode == "get-tuple-element" and inst.operands and index is None:
            index = int(inst.attributes.get("index", "0"))
            name = inst.operands[0]
        elif inst.opcode == "fusion":
            callee = _callee(module, inst)
            if callee is None or not callee.instructions:
                return None
            comp, name = callee, callee.root.name
        elif inst.opcode == "tuple" and index is not None:
            if index >= len(inst.operands):
                return None
            name, index = inst.operands[index], None
        elif index is None:
            return comp.name, inst.name
        else:
            return None
    return None


def _callee(module: Module, inst: Instruction) -> Computation | None:
    called = inst.called(CallRole.FUSION)
    return module.by_name.get(called[0]) if called else None


def offsets_of_recomputed_collectives(ops: Iterable[tuple[SiteKey, Instruction]], remat: set[SiteKey]) -> set[SiteKey]:
    """The integer scalar ops of a fused computation whose reducing collective is recompute (at that
    call site): an all-reduce-scatter fusion's slice offset (`partition-id * part`), which each
    device computes to take its part of the reduced sums. The fusion runs because of remat where
    its collective does, and so does its offset arithmetic (TPU draw 6: multiply -1 before)."""
    ops = list(ops)
    sites = {(key[0], key[2]) for key, inst in ops if key in remat and inst.opcode in REDUCING}
    return {key for key, inst in ops if (key[0], key[2]) in sites and key not in remat
            and not inst.shape.is_tuple and not inst.shape.dims and inst.shape.element_type[:1] in ("s", "u")}
