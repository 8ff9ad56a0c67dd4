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
all-reduce with the forward's or the backward's) runs partly because of remat: one row cannot say
which part, so the report is unsure of it (`unsure`: the range covers it). A collective whose
operands are the forward's own values is never touched: the rule reads only what the other rules
found recompute, and the program without remat has none.
"""

from __future__ import annotations

from typing import Iterable

from hloparse.ir import CallRole, Computation, Instruction, Module
from hloflops.remat.sites import Key, SiteKey


# Collectives that compute: a reduction of their operands across devices (an async all-reduce's
# start holds its reduction). An all-gather or all-to-all computes nothing, and what it moves says
# less: a backward op reading a recompute gathers it where the program without remat gathers the
# forward's value.
REDUCING = frozenset({"all-reduce", "all-reduce-start", "reduce-scatter"})
# Ops that hand their operand's value on unchanged (a layout, a shape).
_PASSING = frozenset({"bitcast", "copy", "reshape"})


def collectives_of_recomputes(module: Module, ops: Iterable[tuple[SiteKey, Instruction, bool]], remat: set[SiteKey],
                              sure: set[SiteKey]) -> tuple[set[SiteKey], set[SiteKey], set[Key]]:
    """Of `ops` (site key, instruction, remat-marked), the marked collectives whose every operand
    is computed by a recompute (an instruction in `remat` at each of its call sites), those of them
    whose operands are all in `sure` too, and the collectives with some operands recompute and
    some not (unsure)."""
    ops = list(ops)
    flags: dict[Key, list[bool]] = {}
    for key, _, _ in ops:
        flags.setdefault(key[:2], []).append(key in remat)
    recompute = {key for key, at in flags.items() if all(at)}
    sure_keys = {key[:2] for key in sure}
    found: set[SiteKey] = set()
    certain: set[SiteKey] = set()
    partly: set[Key] = set()
    for key, inst, marked in ops:
        if inst.opcode not in REDUCING or key in remat or not inst.operands:
            continue
        sources = [_source(module, module.by_name[key[0]], name) for name in inst.operands]
        recomputed = [s in recompute for s in sources]
        if marked and all(recomputed):
            found.add(key)
            if all(s in sure_keys for s in sources):
                certain.add(key)
        elif any(recomputed):
            partly.add(key[:2])
    return found, certain, partly


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
