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
number) other such ops in other fused computations compute too, and which reads, through cheap ops,
views and fusion boundaries, a remat-named matmul: the rebuilt `h`. Through cheap ops only, not an
expensive one (a transcendental, a divide, which XLA never copies into a reader): gelu's derivative
is a polynomial in `h` and `tanh(h)`, its chain's ops read `h` itself; a softmax's gradient reads the
rebuilt scores only through `exp` and the divide by their sum, and both programs copy its cheap
products into each reader alike (TPU 26, linen_loop under no policy, exact: `P * dP` in the row-sum's
fusion and in the scores' gradient, in the twin too). A chain reading no recomputed matmul starts
from the values both programs store alike and is fused alike (TPU 15, eqx_list under no policy: the
chain reads the forward's stored `h` and the backward's cotangent, behind whose matmul both programs
fuse it and copy it into the weight gradient's fusion; its remat-named ops are the linearization's
own `1 - tanh` and `3 x**2`): no hinge there. And only a copy nested as a matmul's operand (the
weight or input gradient's), the copy that stands in for reading the stored chain: a layer norm's
gradient product in the bias gradient's multi-output fusion (utpu 188, exact) is no such copy."""

from __future__ import annotations

from typing import Mapping

from hloflops.remat.gradient_operand_copies import operand_fusions
from hloflops.remat.op_kinds import DUPLICATED, EXPENSIVE, MATMUL_OPCODES
from hloflops.remat.sites import SiteKey, SiteOp, one_call_site
from hloflops.scopes import phase
from hloparse.ir import CallRole, Computation, Instruction, Module, parameter_number

# What the walk from a chain's op back to the rebuilt `h` passes through: nothing but cheap ops,
# views and the plumbing between fusions (the matmul's output is read as stored or fused in).
_PASSES = (DUPLICATED - EXPENSIVE) | frozenset({"bitcast", "copy", "reshape", "transpose", "broadcast", "convert",
                                   "get-tuple-element", "tuple", "parameter", "fusion"})


def copied_gradient_chains(module: Module, ops: list[SiteOp], remat: set[SiteKey]) -> set[SiteKey]:
    """The keys of the unmarked cheap backward ops of a checkpoint's transpose that read a marked op
    in their fused computation, of every value computed so in more than one fused computation, which
    reads a remat-named matmul: its copies nested as a matmul's operand, but the first in program
    order; none already counted as remat."""
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
    recomputed = {op.key[:2] for op in ops if op.named and op.inst.opcode in MATMUL_OPCODES}
    if not recomputed:
        return set()
    callers = one_call_site(module)
    operands = _matmul_operand_fusions(module)
    copies: set[SiteKey] = set()
    for members in classes.values():
        if len({m.key[0] for m in members}) > 1 and all(
                _reads_recomputed(module, m.key[0], m.inst, recomputed, callers) for m in members):
            first = min(members, key=lambda m: m.order)
            copies |= {m.key for m in members
                       if m is not first and m.key not in remat and m.key[0] in operands}
    return copies


def _matmul_operand_fusions(module: Module) -> set[str]:
    """The fused computations of fusions nested as a matmul's operand (through views): the copies
    of a chain XLA made in place of reading it stored."""
    return {name for comp, inst in module.instructions() if inst.opcode in MATMUL_OPCODES
            for name in operand_fusions(comp, inst)}


def _reads_recomputed(module: Module, comp: str, inst: Instruction, recomputed: set[tuple[str, str]],
                      callers: Mapping[str, tuple[Computation, Instruction] | None]) -> bool:
    """Does `inst` (in `comp`) read a remat-named matmul (`recomputed`) through `_PASSES` only: into
    a fusion's root, out of a fused computation's parameter to its one call site's operand?"""
    stack, visited = [(comp, inst)], set()
    while stack:
        comp_name, cur = stack.pop()
        key = (comp_name, cur.name)
        if key in recomputed:
            return True
        if key in visited or cur.opcode not in _PASSES:
            continue
        visited.add(key)
        computation = module.by_name[comp_name]
        if cur.opcode == "parameter":
            site = callers.get(comp_name)
            number = parameter_number(cur)
            if site is not None and number < len(site[1].operands):
                caller, fusion = site
                stack.append((caller.name, caller.by_name[fusion.operands[number]]))
        elif cur.opcode == "fusion":
            for callee in cur.called(CallRole.FUSION):
                stack.append((callee, module.by_name[callee].root))
        else:
            stack.extend((comp_name, computation.by_name[o]) for o in cur.operands if o in computation.by_name)
    return False
