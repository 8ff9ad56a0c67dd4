"""A forward matmul TPU runs as a windowed einsum because the backward gathers a recompute instead
of the forward's gathered activation (after optimization; TPU, tensor parallel).

Under tensor parallelism a forward matmul reads an activation sharded across devices. XLA either
all-gathers it and runs one matmul, or runs a windowed einsum: a loop that passes the shards
around (`collective-permute`) and accumulates one partial product per trip into a buffer,
`acc' = select(first trip, 0, acc) + x_i @ w_i`, with the weight narrowed for the loop. The
program without remat gathers the activation once for two readers, the forward matmul and the
backward's weight gradient (`dW = x^T dy` reads the same gathered `x`), and a gather it needs
anyway costs the forward matmul nothing: one plain matmul, no loop. With remat the backward's
weight gradient reads the recompute's copy of `x` and gathers that; the forward's gather has
the forward matmul alone for its reader, and XLA makes it a windowed einsum. So the loop's
accumulating adds and selects (and its counters) run because of remat; the matmuls inside do
not (the program without remat runs the same product as one matmul). TPU draw 23 (nested
checkpoints, tensor parallel: add +512, select +512 in two such loops). Where the backward
gathers a forward value instead (no recompute of it), the program without remat has the same
loop (TPU draws 31, 38, 44): nothing is moved.

The weight's narrow feeding only such a loop is the loop's too, but the program without remat
may narrow the weight for its plain matmul as well (the fusion decides): a stand-in, in the
range only.

Only for a window loop in the forward (no `transpose(` in its name, no remat name; its matmuls
all named as the loop, as XLA names the loop it builds for one matmul: not a gradient
accumulation's microbatch loop around matmuls, TPU 231) holding a collective-permute, where
an all-gather named for the same matmul's transpose gathers a remat-named value (through views),
or where the recompute of the same matmul (its name inside the
checkpoint ending the loop matmul's name) all-gathers its operand under its own remat name: haiku
names the gather for the recompute's matmul, which the weight gradient reads gathered too
(held-out TPU 99: two such loops, add and select 1,024 each, now remat)."""

from __future__ import annotations

from typing import Iterator

from hloflops.remat.names import ends_with, inner_tail, is_remat_named, model_components
from hloflops.remat.op_kinds import MATMUL_OPCODES
from hloflops.remat.sites import SiteKey, SiteOp
from hloparse.ir import CallRole, Computation, Instruction, Module

_VIEWS = frozenset({"bitcast", "reshape", "copy", "transpose", "get-tuple-element"})
PERMUTES = frozenset({"collective-permute", "collective-permute-start"})
GATHERS = frozenset({"all-gather", "all-gather-start"})


def regathered_windowed_einsums(module: Module, ops: list[SiteOp]) -> tuple[set[SiteKey], set[SiteKey]]:
    """(the FLOPs of forward windowed einsum loops but their matmuls: remat; the narrows feeding
    only such a loop: stand-ins), per the module docstring."""
    regathered = regathered_matmuls(module)
    recomputes = recompute_gathers(module)
    if not regathered and not recomputes:
        return set(), set()
    loop_comps: set[str] = set()
    feeds: set[tuple[str, str]] = set()  # (computation, instruction) of what only a loop reads
    for comp, inst, inside, held in forward_permuting_loops(module):
        matmuls = [i for i in held if i.opcode in MATMUL_OPCODES]
        # A window loop is XLA's for one matmul and carries its name; a loop of the model's (a
        # gradient accumulation's microbatches, a scan) holding window loops or unrolled windows
        # is not one, whatever its matmuls are named (TPU 231: plain jax's `dot_general`).
        if not window_loop(inst, matmuls):
            continue
        # A recompute's own gather marks only a window loop (named as its matmul; not a scan's loop).
        if not any(model_components(m.op_name) in regathered or m.op_name == inst.op_name
                   and any(ends_with(m.op_name, t) for c, t in recomputes if c == comp.name) for m in matmuls
                   if m.op_name):
            continue
        loop_comps |= inside
        feeds |= only_for(comp, inst)
    counted = {op.key for op in ops if op.key[0] in loop_comps and op.inst.opcode not in MATMUL_OPCODES}
    narrows = {op.key for op in ops if op.inst.opcode == "convert"
               and ((op.key[0], op.key[1]) in feeds or (op.frame, op.key[0]) in feeds)}
    return counted, narrows


def window_loop(loop: Instruction, matmuls: list[Instruction]) -> bool:
    """Is `loop` a windowed einsum's: matmuls inside, all named as the loop? XLA names the loop it
    builds for a matmul after that matmul (TPU 23, 99); a model's loop (`jit(step)/while`) runs
    matmuls of other names, its windowed einsums' loops nested inside it."""
    return bool(matmuls) and all(m.op_name == loop.op_name for m in matmuls)


def regathered_matmuls(module: Module) -> set[tuple[str, ...]]:
    """Model names of the matmuls whose transpose all-gathers a remat-named value."""
    out: set[tuple[str, ...]] = set()
    for comp, inst in module.instructions():
        if inst.opcode in GATHERS and "transpose(" in inst.op_name and inst.operands \
                and _from_recompute(comp, inst.operands[0]):
            out.add(model_components(inst.op_name))
    return out


def recompute_gathers(module: Module) -> set[tuple[str, tuple[str, ...]]]:
    """(computation, inner name `inner_tail`) of the recomputed matmuls that all-gather their own
    operand, under the recompute's name (haiku, TPU held-out 99: `checkpoint/rematted_computation/
    linear_4/dot_general`): the weight gradient reads that gathered copy, and the forward's gather is
    the forward matmul's alone. Only in the window loop's own computation: the program without remat
    shares a gather between its forward matmul and weight gradient in one frame only (in a scan the
    backward loop gathers its stacked activation again; TPU held-out 77, flax's remat_scan, keeps
    its window loop without remat too)."""
    return {(comp.name, inner_tail(inst.op_name)) for comp, inst in module.instructions()
            if inst.opcode in GATHERS and is_remat_named(inst) and inst.op_name.endswith("dot_general")}


def _from_recompute(comp: Computation, name: str) -> bool:
    """Does the value `name` come, through views, from a remat-named instruction?"""
    for _ in range(16):
        inst = comp.by_name.get(name)
        if inst is None:
            return False
        if is_remat_named(inst):
            return True
        if inst.opcode not in _VIEWS or not inst.operands:
            return False
        name = inst.operands[0]
    return False


def reachable_within(module: Module, roots: tuple[str, ...]) -> set[str]:
    """The computations `roots` and everything they call."""
    seen: set[str] = set()
    pending = list(roots)
    while pending:
        name = pending.pop()
        if name in seen or name not in module.by_name:
            continue
        seen.add(name)
        pending += [call.computation for inst in module.by_name[name].instructions for call in inst.calls]
    return seen


def forward_permuting_loops(module: Module) -> Iterator[tuple[Computation, Instruction, set[str], list[Instruction]]]:
    """Each forward `while` (not a transpose's, not remat-named) whose body and condition, with what
    they call, pass something on with a collective-permute, as a windowed product's loop does: (its
    computation, the loop, the computations it reaches, their instructions)."""
    for comp, inst in module.instructions():
        if inst.opcode != "while" or "transpose(" in inst.op_name or is_remat_named(inst):
            continue
        inside = reachable_within(module, inst.called(CallRole.WHILE_BODY) + inst.called(CallRole.WHILE_CONDITION))
        held = [i for name in inside for i in module.by_name[name].instructions]
        if any(i.opcode in PERMUTES for i in held):
            yield comp, inst, inside, held


def only_for(comp: Computation, loop: Instruction) -> set[tuple[str, str]]:
    """The converts (or fusions, by their fused computation) read only by the tuple starting `loop`."""
    out: set[tuple[str, str]] = set()
    start = comp.by_name.get(loop.operands[0]) if loop.operands else None
    if start is None or start.opcode != "tuple":
        return out
    for name in start.operands:
        inst = comp.by_name.get(name)
        if inst is None or [u.name for u in comp.users.get(name, ())] != [start.name]:
            continue
        if inst.opcode == "convert":
            out.add((comp.name, inst.name))
        elif inst.opcode == "fusion":
            out |= {(comp.name, callee) for callee in inst.called(CallRole.FUSION)}
    return out
