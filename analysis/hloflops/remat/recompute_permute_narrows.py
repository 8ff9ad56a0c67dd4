"""A value narrowed only for a recompute's windowed einsum to pass on (after optimization, TPU,
tensor parallel).

Under tensor parallelism the partitioner may run a matmul as a windowed einsum unrolled into its
caller's frame: each step passes a bf16 window of an operand, or of a partial sum, to the next
device with a `collective-permute` (or its async start) named for the matmul it serves. The value
passed is narrowed for the transfer by an unnamed `convert` (f32 to bf16), on its own or as the
root of a fusion of its own. jax's checkpoint hands the recompute its inputs through the barrier,
so CSE cannot merge the recompute's matmul with the forward's: the recompute's einsum passes its
own windows, under its own remat name (`.../rematted_computation/dot_general`), and narrows each
of them again, though the forward narrowed the same value for its own permutes (TPU draw 325, a
tensor-parallel gradient accumulation, `nothing_saveable`: the forward's partial sums, narrowed
once in their fusions for the forward's permutes and again, unfused, for the recompute's six).
The program without remat runs no recompute, hence no such permute: a narrow whose every reader
is a permute under a remat name runs because of remat.

The backward's own windowed einsums (named `transpose(...)` outside the recompute) narrow their
windows alike in both programs: a narrow read by them stays the model's. Unsure all the same: how
XLA split the narrows between fusions and its caller in the program without remat is not in
sight, so these are in the range, not a sure share (TPU 325: convert -1,536 out of range ->
exact)."""

from __future__ import annotations

from typing import Iterable

from hloflops.remat.names import is_remat_named
from hloflops.remat.regathered_windowed_einsums import PERMUTES
from hloflops.remat.sites import SiteKey, SiteOp, fusion_callers
from hloparse.ir import Computation, Instruction, Module


def recompute_permute_narrows(module: Module, ops: Iterable[SiteOp]) -> set[SiteKey]:
    """The unnamed f32-to-bf16 narrows whose every reader is a collective-permute under a remat
    name, directly or as a fusion's root (see the module's docstring)."""
    callers = fusion_callers(module)
    found: set[SiteKey] = set()
    for op in ops:
        inst = op.inst
        if inst.opcode != "convert" or op.op_name or op.named or not inst.operands:
            continue
        comp = module.by_name[op.key[0]]
        if not _narrows(comp, inst):
            continue
        readers = comp.users.get(inst.name, ())
        if not readers and comp.root is inst:  # a fusion's root: read through its one fusion
            sites = callers.get(comp.name, [])
            if len(sites) != 1:
                continue
            caller, fusion = sites[0]
            readers = caller.users.get(fusion.name, ())
        if readers and all(reader.opcode in PERMUTES and is_remat_named(reader) for reader in readers):
            found.add(op.key)
    return found


def _narrows(comp: Computation, inst: Instruction) -> bool:
    """Is the convert a float narrowing (f32 to bf16 or f16)?"""
    source = comp.by_name.get(inst.operands[0])
    return source is not None and str(source.shape.element_type).lower() == "f32" \
        and str(inst.shape.element_type).lower() in ("bf16", "f16")
