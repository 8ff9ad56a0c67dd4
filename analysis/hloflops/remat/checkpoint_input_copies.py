"""A cheap forward value that a checkpoint reads as its input, stored once here, which the program
without remat may copy into each of its readers (hloflops.remat.pairing calls
`checkpoint_input_copies` on TPU).

jax's checkpoint passes the values its recompute reads from outside through an
`optimization-barrier` in the backward. A barrier cannot take a fused producer, and XLA's
instruction fusion forbids duplicating a producer whose operands outweigh its output unless it can
fuse it into every consumer (`InstructionFusion::ComputeGloballyUnfusible`): so the value is
computed once, in a fusion of its own, and every reader reads it stored, the forward's as well as
the recompute's (the barrier itself is gone from the optimized text). The program without remat has
no barrier and may copy the cheap chain into each of its readers, the forward's and the gradient
fusions' alike, each narrowing it for its matmul: an encoder-decoder's final encoder layer norm,
read by every decoder block's cross-attention key and value projections and their weights'
gradients, is one fusion here (stored as bf16) and twelve copies there (TPU draws htpu 101, ntpu
125: add, subtract and two multiplies eleven times each, 720,896 FLOPs on 101). Whether it does
rests on how XLA fused that program (any reader it cannot fuse into keeps it stored): nothing in
this program tells, so the readers less one are a `twin_copies` hinge of each cheap op of the
chain, lowering the range's low end only, never the split.

Only where this program shows the barrier's effect: a forward fusion outside every checkpoint,
without an expensive op or a reduce (XLA never duplicates those), handing out one value read by a
recompute (`rematted_computation`) fusion and by at least two others, all of them fusions (an
unfused reader or a root keeps the value stored in both programs)."""

from __future__ import annotations

from typing import Mapping

from hloflops.remat.names import REMAT_SCOPE, old_frames
from hloflops.remat.op_kinds import DUPLICATED, EXPENSIVE
from hloflops.remat.sites import fusion_call_counts, one_call_site
from hloflops.scopes import phase
from hloparse.ir import CallRole, Computation, Instruction, Module

# The ops a copy of the chain repeats: cheap elementwise ones (a narrowing convert is the reader's
# own cast of the value, made in both programs once per matmul operand).
CHEAP_COPIED = DUPLICATED - EXPENSIVE - {"convert"}
_VIEWS = frozenset({"bitcast", "copy", "reshape", "transpose"})
# Ops that compute nothing or that XLA never copies into a consumer.
FREE_OPS = frozenset({"parameter", "constant", "broadcast", "bitcast", "reshape", "copy", "transpose", "convert",
                   "fusion"})


def checkpoint_input_copies(module: Module) -> Mapping[tuple[str, str], int]:
    """(fused computation, op) -> how many more times the program without remat may run the op:
    the readers of the stored value outside the recompute, less this program's one (module docstring)."""
    out: dict[tuple[str, str], int] = {}
    fused = fusion_call_counts(module)  # the fused computations
    for callee, site in one_call_site(module).items():
        if site is None:
            continue
        caller, fusion = site
        comp = module.by_name.get(callee)
        if comp is None or comp.root is None or fusion.shape.is_tuple or caller.name in fused:
            continue
        if not outside_checkpoints(fusion) or phase(fusion.op_name) != "forward":
            continue
        chain = _cheap_chain(module, comp)
        if not chain:
            continue
        readers = fusion_readers(caller, fusion)
        if not readers or any(inst.is_root for inst in readers):
            continue
        others = [inst for inst in readers if not _recomputes(inst)]
        if len(others) == len(readers):
            continue
        # The program without remat copies the chain into each reader it can fuse it into and
        # stores it once for the others (a collective, a layout copy it keeps).
        fused_others = sum(inst.opcode == "fusion" for inst in others)
        copies = fused_others + (fused_others < len(others))
        if copies > 1:
            for name in chain:
                out[(callee, name)] = copies - 1
    return out


def fusion_readers(caller: Computation, fusion: Instruction, passing: frozenset[str] = _VIEWS,
                   root_reads: bool = True) -> list[Instruction]:
    """What reads the fusion's value in its caller, through the `passing` ops on it (views: a layout
    copy, a bitcast); with `root_reads`, a passing op that is the caller's root is a reader."""
    users: dict[str, list[Instruction]] = {}
    for inst in caller.instructions:
        for operand in set(inst.operands):
            users.setdefault(operand, []).append(inst)
    out: list[Instruction] = []
    pending, seen = [fusion.name], set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        for inst in users.get(name, ()):
            if inst.opcode in passing and not (root_reads and inst.is_root):
                pending.append(inst.name)
            else:
                out.append(inst)
    return out


def _recomputes(inst: Instruction) -> bool:
    """A reader in a checkpoint's recompute (jax's `rematted_computation`, older jax's `remat` frame)."""
    return REMAT_SCOPE in inst.op_name or bool(old_frames(inst.op_name))


def outside_checkpoints(inst: Instruction) -> bool:
    """An op of the program's own forward: no checkpoint's name, no remat name."""
    name = inst.op_name
    return bool(name) and "checkpoint" not in name and "remat" not in name


def _cheap_chain(module: Module, comp: Computation) -> list[str]:
    """The cheap elementwise ops of a fused computation (nested fusions included), or none where it
    holds an op XLA would not copy into a consumer (an expensive one, a reduce, a matmul)."""
    chain: list[str] = []
    for inst in comp.instructions:
        if inst.opcode == "fusion":
            for callee in inst.called(CallRole.FUSION):
                nested = module.by_name.get(callee)
                if nested is None:
                    return []
                inner = _cheap_chain(module, nested)
                if any(i.opcode not in FREE_OPS for i in nested.instructions) and not inner:
                    return []
            continue
        if inst.opcode in FREE_OPS:
            continue
        if inst.opcode not in CHEAP_COPIED:
            return []
        chain.append(inst.name)
    return chain
