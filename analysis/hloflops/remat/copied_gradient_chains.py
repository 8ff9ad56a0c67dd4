"""A checkpoint's backward chain read from a recompute, which this program computes in several
fusions where the program without remat may compute it once and store it (after optimization, TPU
only; hloflops.remat.pairing calls `copied_gradient_chains` beside hloflops.remat.stored_forward_copies).

A gradient through a cheap activation, `dh = dy' * act'(h)` (gelu's 14-multiply chain), reads two
values: the cotangent `dy'` (the next matmul's input gradient) and the activation's input `h`. The
program without remat stores `h` in its forward; TPU's fusion then puts the chain behind the
cotangent's matmul (an output fusion) and stores it once, narrowed, for its readers (the bias
gradient's reduce, the weight gradient's and the input gradient's matmuls). With remat, `h` is
rebuilt in the backward by a recomputed matmul: the chain reads two backward matmul outputs, XLA
fuses it behind one of them at most, and copies the cheap chain into the other readers' fusions
(nested as the matmul's operand). utpu 200 (nnx_scan, nothing_saveable, gelu): the chain in the
recompute's fusion for the bias gradient and again nested in the weight gradient's (twin: once,
behind the cotangent matmul, stored as bf16; multiply 6,144, add 3,072, subtract 512 run because of
remat); wtpu 323 (scan_unrolled, no policy): nested in both the weight and the input gradient's
fusions on two of three layers (twin: once per layer).

The chain's ops carry the checkpoint's backward name, not the recompute's: no pairing by value or
name counts them, and the range left them out. But how many copies the program without remat makes
is not in this program either: hloflops.remat.stored_gradient_chains shows twins that copy the
chain into each reader (TPU 43, 102, 115). So a copy beyond the first is a "maybe remat" hinge (the
range's high end covers it; the split keeps it as model FLOPs), never a sure share.

The sign in this program: a cheap backward op of a checkpoint's transpose (not marked) inside a
fused computation, reading (within that computation) a remat-marked op, whose value (its value
number) other such ops in other fused computations compute too. A chain reading no recompute starts
from the values both programs store alike and is fused alike: no hinge there."""

from __future__ import annotations

from hloflops.remat.op_kinds import DUPLICATED
from hloflops.remat.sites import SiteKey, SiteOp
from hloflops.scopes import phase
from hloparse.ir import CallRole, Module


def copied_gradient_chains(module: Module, ops: list[SiteOp], remat: set[SiteKey]) -> set[SiteKey]:
    """The keys of the unmarked cheap backward ops of a checkpoint's transpose that read a marked op
    in their fused computation, each but one (the first in program order) of every value computed
    so in more than one fused computation; none already counted as remat."""
    fused = {callee for _, inst in module.instructions() if inst.opcode == "fusion"
             for callee in inst.called(CallRole.FUSION)}
    by_comp: dict[str, list[SiteOp]] = {}
    for op in ops:
        if op.key[0] in fused:
            by_comp.setdefault(op.key[0], []).append(op)
    classes: dict[object, list[SiteOp]] = {}
    for comp_name, comp_ops in by_comp.items():
        if not any(op.marked for op in comp_ops):
            continue
        marked = {op.inst.name for op in comp_ops if op.marked}
        reads: set[str] = set()  # names in the computation that read a marked op, directly or not
        for inst in module.computation(comp_name).instructions:  # operands come first in HLO text
            if inst.name in marked or any(o in marked or o in reads for o in inst.operands):
                reads.add(inst.name)
        for op in comp_ops:
            if (not op.marked and op.inst.opcode in DUPLICATED and op.inst.name in reads
                    and phase(op.op_name) == "backward" and "checkpoint" in op.op_name
                    and not isinstance(op.exact, tuple)):
                classes.setdefault(op.exact, []).append(op)
    copies: set[SiteKey] = set()
    for members in classes.values():
        if len({m.key[0] for m in members}) > 1:
            first = min(members, key=lambda m: m.order)
            copies |= {m.key for m in members if m is not first and m.key not in remat}
    return copies
