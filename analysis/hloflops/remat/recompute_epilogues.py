"""The epilogue of a recomputed matmul inside a gradient fusion (after optimization;
hloflops.remat.pairing calls `recompute_epilogues` after hloflops.remat.fusion_copies).

TPU fuses a matmul's elementwise consumers into the matmul's output fusion (`convolution_add_fusion`:
the bias add), and where the backward reads the sum it may fuse its own first ops there too. A
checkpoint around the whole model recomputes the head's matmul and bias add in the backward, and
XLA fuses them with the loss's cotangent (`2 * y / n`), the bias gradient's reduce and the narrowing
of the cotangent for the weight gradients: a fusion whose outputs are all gradients. Rule 4
(hloflops.remat.fusion_copies) takes a remat-named cheap op there for a copy the program without
remat makes in its gradient fusion too. Not one that reads a recomputed matmul of its own fusion:
XLA never duplicates a matmul, so what reads this one here reads a value only the recompute
computes, and the program without remat reads its forward's value instead; where its forward
computes the cheap op in the forward matmul's own output fusion (the bias add, fused with the
matmul), it stores the sum there, or fuses the cotangent's first ops into that fusion: its
gradient fusions copy no bias add (TPU draws 2 and 24: the head's bias add, add -8,192 and -512
after optimization). So a remat-named cheap op that reads, within its fusion, a recomputed matmul of
that fusion (through other such ops and views) is recompute where a forward twin of it (by its name
inside the checkpoint: the recompute may read other recomputes, and match by signature only)
shares a fusion with a forward twin of the matmul. Under FSDP the partial sums are completed first,
by an all-reduce-scatter fusion, and the bias add reads that fusion's slice at a parameter: the same
holds where the op reads a recomputed collective there and its forward twin's fusion reads a
forward collective (TPU draw 6: add -8,192; the program without remat fuses the loss's cotangent, the bias add
and the loss's square into one fusion). Only ops a pairing found a forward twin for: the linearization's own
coefficients (gelu's `3 * x * x`) stay model FLOPs. It rests on how XLA fused the program without
remat, as every fusion rule's cheap op does: in the range, not `paired_by_value`."""

from __future__ import annotations

from typing import Mapping

from hloflops.remat.collectives import REDUCING
from hloflops.remat.names import ends_with, inner_tail
from hloflops.remat.op_kinds import DUPLICATED, EXPENSIVE, LAYOUT_VIEWS, MATMUL_OPCODES, shape_key
from hloflops.remat.sites import SiteKey, SiteOp, one_call_site, source_op
from hloparse.ir import Instruction, Module

# What hands a collective's result on to the fusion reading it: views, and the slice of an
# all-reduce-scatter fusion (each device's part of the reduced sums).
_HANDS_ON = frozenset({"bitcast", "copy", "reshape", "dynamic-slice", "slice"})


def recompute_epilogues(module: Module, ops: list[SiteOp], fused: Mapping[str, frozenset[str]],
                        remat: set[SiteKey], copies: set[SiteKey]) -> set[SiteKey]:
    """Of the remat-named cheap ops paired with a forward twin that rule 4 took for copies (`copies`),
    those that read a recomputed matmul of their own fusion (directly or through other such ops and
    views), where a forward twin of theirs (`_Homes`) shares a fusion with one of that matmul's, or
    read at a parameter of their fusion a recomputed collective completing a matmul's sums, where
    a forward twin of theirs reads a forward collective at a parameter of its fusion."""
    by_key = {op.key: op for op in ops if op.key[0] in fused}
    if not any(key in copies for key in by_key):
        return set()
    matmuls = {key for key, op in by_key.items() if key in remat and op.marked and op.inst.opcode in MATMUL_OPCODES}
    every = {op.key: op for op in ops}
    callers = one_call_site(module)
    homes = _Homes(ops, fused)
    collected: set[SiteKey] = set()  # the recomputed collectives read at a fusion's parameter
    reads: dict[SiteKey, frozenset[SiteKey]] = {}  # op -> the recomputed matmuls it reads in its fusion
    after_collective: dict[str, bool] = {}  # a forward fusion -> does it read a forward collective?

    def source(comp: str, name: str, site: int) -> SiteOp | None:
        return source_op(module, callers, every, module.by_name[comp], name, site, _hands_on, 16)

    def read(key: SiteKey) -> frozenset[SiteKey]:
        if key in reads:
            return reads[key]
        reads[key] = frozenset()  # a cycle reads nothing (a malformed module)
        op = by_key.get(key)
        if key in matmuls:
            reads[key] = frozenset({key})
        elif op is None:  # a parameter or a view XLA left unpaired
            found = source(*key)
            if found is not None and found.key in matmuls and found.key[0] == key[0]:  # through a view
                reads[key] = frozenset({found.key})
            elif found is not None and found.key in remat and found.inst.opcode in REDUCING:
                collected.add(found.key)
                reads[key] = frozenset({found.key})
        elif _cheap_marked(op) or op.inst.opcode in LAYOUT_VIEWS:
            reads[key] = frozenset().union(*(read((key[0], name, key[2])) for name in op.inst.operands))
        return reads[key]

    def reads_a_collective(home: str) -> bool:
        if home not in after_collective:
            params = [inst.name for inst in module.by_name[home].instructions if inst.opcode == "parameter"]
            after_collective[home] = any(
                (found := source(home, name, 0)) is not None and not found.marked and found.inst.opcode in REDUCING
                for name in params)
        return after_collective[home]

    out: set[SiteKey] = set()
    for key, op in by_key.items():
        if key not in copies or key in remat or not _cheap_marked(op):
            continue
        here = homes.of(op)
        if here and any(any(reads_a_collective(home) for home in here) if value in collected
                        else here & homes.of(by_key[value]) for value in read(key)):
            out.add(key)
    return out


def _hands_on(inst: Instruction) -> bool:
    return inst.opcode in _HANDS_ON


def _cheap_marked(op: SiteOp) -> bool:
    return op.marked and op.inst.opcode in DUPLICATED and op.inst.opcode not in EXPENSIVE


class _Homes:
    """The fused computations where the forward computes a recompute's value: those holding an
    unmarked op of its opcode and result whose name ends as the recompute's does inside its
    checkpoint (`Dense_0/add`). By name, not value: a recompute reading other recomputes (the
    layer norm's output, gathered again) may match its forward only by signature."""

    def __init__(self, ops: list[SiteOp], fused: Mapping[str, frozenset[str]]) -> None:
        self.forward: dict[tuple, list[SiteOp]] = {}
        for op in ops:
            if not op.marked and op.op_name and op.key[0] in fused:
                self.forward.setdefault((op.inst.opcode, shape_key(op.inst.shape)), []).append(op)
        self.cache: dict[SiteKey, frozenset[str]] = {}

    def of(self, op: SiteOp) -> frozenset[str]:
        found = self.cache.get(op.key)
        if found is None:
            tail = inner_tail(op.op_name) if op.op_name else ()
            found = frozenset(twin.key[0] for twin in self.forward.get((op.inst.opcode, shape_key(op.inst.shape)), ())
                              if tail and ends_with(twin.op_name, tail))
            self.cache[op.key] = found
        return found
