"""A recompute's copy, nested in a gradient fusion, of a value this program's forward stores as a
fusion's output: a hinge (hloflops.remat.pairing puts `stored_forward_copies` in the range).

TPU's fusion copies a cheap producer into each fusion reading it. Where a recompute rebuilds a
layer norm's output only for the weight gradients of the matmuls reading it (a policy saving the
batched dots, not the projections), XLA nests the normalizing chain into each weight-gradient fusion
(the query's, the key's and the value's, plain or async-collective): three copies per norm (TPU
draw 356, a tensor-parallel whole-model checkpoint: subtract -491,520, multiply -802,816 counted as
model FLOPs). The program without remat stores the forward's norm output (its `fusion.35`) as a
residual and its weight-gradient fusions read it: they copy nothing. The sign in this program is
its own forward: it materializes the same value (the recompute's inner name, the same dimensions)
as the output of a fusion of its own, so the twin, whose forward is that forward, has it stored to
read. Where the forward fuses the value into its reader instead (gelu fused into `Dense_1`'s matmul,
TPU draws 2 and 6), the twin's gradient fusion copies it as this program does, and no rule here fires.
Whether the twin reads the stored value or still copies it (XLA may prefer a copy to a read of a
large operand) is not in this program: the copies are unsure, not remat's (the range's high end
covers them; the reported count keeps them as model FLOPs).
"""

from __future__ import annotations

from hloflops.remat.names import inner_tail, ends_with, is_remat_named
from hloflops.remat.op_kinds import DUPLICATED
from hloflops.remat.sites import SiteKey, SiteOp
from hloflops.scopes import phase
from hloparse.ir import CallRole, Instruction, Module


def stored_forward_copies(module: Module, ops: list[SiteOp]) -> set[SiteKey]:
    """The remat-marked cheap ops (`DUPLICATED`) of `ops` inside a remat-named fusion nested in
    another fusion whose value (inner name and dimensions) a top-level forward fusion outputs."""
    callees: dict[str, list[str]] = {}
    nested_in_fusion: set[str] = set()
    fused_by: dict[str, tuple[str, Instruction]] = {}  # a fused computation -> its fusion's frame, fusion
    for comp, inst in module.instructions():
        if inst.opcode == "fusion":
            called = list(inst.called(CallRole.FUSION))
            callees[inst.name] = called
            nested_in_fusion.update(called)
            fused_by.update((name, (comp.name, inst)) for name in called)
    stored: dict[tuple[int, ...], list[str]] = {}  # forward fusion outputs, by dimensions
    for comp, inst in module.instructions():
        if inst.opcode == "fusion" and comp.name not in nested_in_fusion and inst.shape.is_array \
                and inst.op_name and not is_remat_named(inst) and phase(inst.op_name) == "forward":
            stored.setdefault(inst.shape.dims, []).append(inst.op_name)
    if not stored:
        return set()
    copied: set[str] = set()  # computations computing such a copy
    for comp, inst in module.instructions():
        if inst.opcode != "fusion" or comp.name not in nested_in_fusion or not inst.shape.is_array \
                or not inst.op_name or not is_remat_named(inst):
            continue
        tail = inner_tail(inst.op_name)
        if phase(_outermost_fusion(fused_by, comp.name).op_name or "") != "backward":
            continue  # nested in a forward fusion (a convolution's packed operand): not a gradient's copy
        if tail and any(ends_with(name, tail) for name in stored.get(inst.shape.dims, ())):
            todo = list(callees.get(inst.name, ()))
            while todo:
                name = todo.pop()
                if name not in copied:
                    copied.add(name)
                    todo.extend(c for i in module.by_name[name].instructions if i.opcode == "fusion"
                                for c in i.called(CallRole.FUSION))
    return {op.key for op in ops if op.marked and op.inst.opcode in DUPLICATED and op.key[0] in copied}


def _outermost_fusion(fused_by: dict[str, tuple[str, Instruction]], comp: str) -> Instruction:
    """The top-level fusion instruction the fused computation `comp` runs inside."""
    frame, inst = fused_by[comp]
    while frame in fused_by:
        frame, inst = fused_by[frame]
    return inst
