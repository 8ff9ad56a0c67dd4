"""A backward value the recompute's matmul fusion stores narrowed, which the program without remat
copies into each matmul reading it (after optimization, TPU, a frame with no backward loop).

A checkpoint around the whole model recomputes the head's matmul in the backward, and TPU fuses
the recompute with what the backward computes from it first: the head's bias add (a recompute),
the loss's cotangent (`y * (2 / n)`, the backward's own multiply) and the bias gradient's reduce.
The fusion hands the cotangent out narrowed to bf16 (an unnamed convert) for the weight's and the
input's gradient matmuls. The program without remat has no recompute to fuse with: its forward's
matmul output fusion computes the loss, the cotangent and the bias gradient, and hands the head's
output out wide; each gradient matmul copies the cotangent's multiply into its own fusion, reading
the wide value, and narrows nothing (TPU draws 2 and 24: convert -8,192 / -512 and multiply
+16,384 / +1,024 before this rule; the bias add is hloflops.remat.recompute_epilogues'). So the
narrow runs only because of remat, and each backward op between the recompute and the narrow runs
once here where the program without remat runs it in every matmul reader, plus once in its
forward's fusion where another op of the fusion reads it there too (the bias gradient's reduce):
as many copies of its opcode and size as that exceeds one offset counted recomputes, the split
being per opcode.

Only where the fusion holds the recomputed matmul itself and a forward matmul of its name exists
(the forward's output fusion the program without remat extends): where a collective completes the
matmul's partial sums first (FSDP, TPU draw 6), the fusion reading it is the program without
remat's too, narrow and all. Only where every reader of the narrowed value is a matmul's fusion:
XLA copies a cheap producer into each of those, wide."""

from __future__ import annotations

from math import prod
from typing import Iterable

from hloflops.remat.names import ends_with, inner_tail
from hloflops.remat.op_kinds import DUPLICATED, EXPENSIVE, LAYOUT_VIEWS, MATMUL_OPCODES, NO_WORK_OPERANDS
from hloflops.remat.sites import SiteKey, SiteOp, one_call_site
from hloflops.remat.type_corrections import bits
from hloparse.ir import CallRole, Computation, Instruction, Module



def stored_cotangents(module: Module, ops: list[SiteOp], remat: set[SiteKey], backward_loops: set[str]
                      ) -> tuple[set[SiteKey], set[SiteKey]]:
    """The narrows to add (each a convert handing out a backward value computed from a recomputed
    matmul of its fusion, read only by matmul fusions) and the counted recomputes to give back
    (module docstring)."""
    by_key = {op.key: op for op in ops}
    callers = one_call_site(module)
    matmul_fusions = {name for name, comp in ((c.name, c) for c in module.computations)
                      if any(inst.opcode in MATMUL_OPCODES for inst in comp.instructions)}
    forward_matmuls = [op for op in ops if not op.marked and op.op_name and op.inst.opcode in MATMUL_OPCODES]
    narrows: set[SiteKey] = set()
    owed: list[tuple[SiteOp, int]] = []  # a backward op of the chain, and the copies the twin makes beyond ours
    for op in ops:
        if op.frame in backward_loops or op.key in remat or op.inst.opcode != "convert":
            continue
        comp = module.by_name[op.key[0]]
        site = callers.get(comp.name)
        chain = _backward_chain(comp, op, by_key, remat)
        if site is None or not chain:
            continue
        readers = _readers(site[0], site[1], comp, op.inst.name)
        if not readers or not all(any(callee in matmul_fusions for callee in reader.called(CallRole.FUSION))
                                  for reader in readers):
            continue
        matmul = chain[1]
        tail = inner_tail(matmul.op_name) if matmul.op_name else ()
        if not tail or not any(twin.frame == matmul.frame and ends_with(twin.op_name, tail)
                               for twin in forward_matmuls):
            continue
        narrows.add(op.key)
        members = {step.inst.name for step in chain[0]}
        for step in chain[0]:
            others = [user for user in comp.users.get(step.inst.name, ()) if user.name not in members
                      and user.name != op.inst.name]
            beyond = len(readers) + (1 if others else 0) - 1
            if beyond > 0:
                owed.append((step, beyond))
    return narrows, _offsets(ops, remat, owed)


def _backward_chain(comp: Computation, narrow: SiteOp, by_key: dict[SiteKey, SiteOp], remat: set[SiteKey]
                    ) -> tuple[list[SiteOp], SiteOp] | None:
    """Where `narrow` narrows an unmarked cheap op computed (through other unmarked cheap ops)
    from a recompute that reads a recomputed matmul of the fusion: those unmarked ops and the
    matmul; else None."""
    inst = narrow.inst
    source = comp.by_name.get(inst.operands[0]) if inst.operands else None
    if source is None or not 0 < bits(inst.shape) < bits(source.shape):
        return None
    chain: list[SiteOp] = []
    matmuls: list[SiteOp] = []
    pending, seen = [source.name], set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        step = comp.by_name.get(name)
        if step is None or step.opcode in NO_WORK_OPERANDS:
            continue
        if step.opcode in LAYOUT_VIEWS:
            pending += step.operands
            continue
        op = by_key.get((comp.name, name, narrow.key[2]))
        if op is None:
            return None
        if op.key in remat and op.marked:  # the recompute: it must reach a recomputed matmul here
            found = _recomputed_matmul(comp, op, by_key, remat)
            if found is None:
                return None
            matmuls.append(found)
        elif not op.marked and op.inst.opcode in DUPLICATED and op.inst.opcode not in EXPENSIVE:
            chain.append(op)
            pending += step.operands
        else:
            return None
    return (chain, matmuls[0]) if chain and matmuls else None


def _recomputed_matmul(comp: Computation, op: SiteOp, by_key: dict[SiteKey, SiteOp], remat: set[SiteKey]
                       ) -> SiteOp | None:
    """The recomputed matmul of the fusion a recompute reads through recomputed cheap ops and views."""
    pending, seen = [op.inst.name], set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        step = comp.by_name.get(name)
        if step is None or step.opcode in NO_WORK_OPERANDS:
            continue
        found = by_key.get((comp.name, name, op.key[2]))
        if step.opcode in LAYOUT_VIEWS:
            pending += step.operands
        elif found is not None and found.key in remat and found.marked:
            if step.opcode in MATMUL_OPCODES:
                return found
            if step.opcode in DUPLICATED and step.opcode not in EXPENSIVE:
                pending += step.operands
    return None


def _readers(frame: Computation, fusion: Instruction, comp: Computation, name: str) -> list[Instruction]:
    """The instructions of `frame` reading the fused value `name` (an output of `fusion`), through
    get-tuple-element and views; empty where the value is not one of the fusion's outputs."""
    root = comp.root
    if root.name == name:
        values = [fusion.name]
    elif root.opcode == "tuple" and name in root.operands:
        index = root.operands.index(name)
        values = [user.name for user in frame.users.get(fusion.name, ())
                  if user.opcode == "get-tuple-element" and int(user.attributes.get("index", -1)) == index]
    else:
        return []
    readers: list[Instruction] = []
    while values:
        for user in frame.users.get(values.pop(), ()):
            if user.opcode in LAYOUT_VIEWS:
                values.append(user.name)
            else:
                readers.append(user)
    return readers


def _offsets(ops: Iterable[SiteOp], remat: set[SiteKey], owed: list[tuple[SiteOp, int]]) -> set[SiteKey]:
    """Counted cheap recomputes of each owed op's opcode and frame whose sizes add up to the owed
    copies' (one element, one flop), those of the owed op's size first, then the fewest others."""
    owing: dict[tuple[str, str], int] = {}
    for step, count in owed:
        kind = (step.inst.opcode, step.frame)
        owing[kind] = owing.get(kind, 0) + count * prod(step.inst.shape.dims)
    sizes = {(step.inst.opcode, step.frame): prod(step.inst.shape.dims) for step, _ in owed}
    out: set[SiteKey] = set()
    for kind, total in owing.items():
        candidates = sorted((op for op in ops if op.key in remat and op.marked and not op.inst.shape.is_tuple
                             and (op.inst.opcode, op.frame) == kind), key=lambda op: op.order)
        by_size: dict[int, list[SiteOp]] = {}
        for op in candidates:
            by_size.setdefault(prod(op.inst.shape.dims), []).append(op)
        order = sorted(by_size, key=lambda size: (size != sizes[kind], -size))
        picked = _sum_to(total, [(size, len(by_size[size])) for size in order])
        for size, n in (picked or {}).items():
            out |= {op.key for op in by_size[size][:n]}
    return out


def _sum_to(total: int, sizes: list[tuple[int, int]], depth: int = 0) -> dict[int, int] | None:
    """How many of each size (at most the count available) add up to `total`, trying sizes in the
    order given and the most of each first; None where none do."""
    if total == 0:
        return {}
    if depth == len(sizes) or depth > 8:
        return None
    size, available = sizes[depth]
    most = min(available, total // size)
    for n in sorted({most, most - 1, most - 2, 0} - {-1, -2}, reverse=True):  # a few tries a size: bounded
        rest = _sum_to(total - n * size, sizes, depth + 1)
        if rest is not None:
            return {**rest, size: n} if n else rest
    return None
