"""The narrows the program without remat may make of an activation read straight off a matmul's
output that a scan offloads to a host stack (after optimization; TPU; a low end for the range).

An offload policy (`offload_dot_with_no_batch_dims`) saves a matmul's bare output `h = x @ w`; in
a scan TPU writes it a step at a time into a stack in the host's memory space (an asynchronous
`dynamic-update-slice-start` into memory space 5) and the backward loop reads it back
(`dynamic-slice-start` / `-done`). With no bias between the matmul and the activation, every copy of
`act(h)` (the forward's, feeding the next matmul; the recompute's, feeding the weight gradient) is
an operand fusion nested in its matmul's fusion, computing in f32 from `h` and narrowing nothing:
the matmul reads it wide. The program without remat stores what jax's scan chose for the backward
(tanh's output, relu's output and mask), not `h`: it computes the activation in a fusion of its own
that writes its stacks and hands the next matmul the activation narrowed to bf16, a `convert` this
program never runs (held-out TPU draw 175, a scan of tanh MLPs: one convert of `[4, 128]` a layer,
convert truth -1,536, below anything a split of this program's ops reaches). Where the activation
commutes with rounding (relu's `max`), XLA may move that narrow onto `h` itself in the matmul's
output fusion and widen and narrow in each copy, as `stored_sum_narrows` found with a bias add
(hloflops.remat.offloaded_sum_narrows). Whether and where TPU narrows rests on how it fused that
program, which this one does not show: each copy stands for the converts it may make (`twin_copies`,
the low end only), never a count: one for a chain that does not commute with rounding (its narrow
of the result), two and one more once per shape of `h` for one that does (the widen and narrow,
and the narrow of `h`).

Only in a loop's body, for an operand fusion read by a matmul whose chain from one parameter to its
root reads each value once, with no bias add (`stored_sum_narrows`' own), and only where the
forward's copy reads a matmul's output written into host memory; a recompute's copy counts where it
reads `h` back from a host stack of a shape the forward's copy reads."""

from __future__ import annotations

from typing import Mapping

from hloflops.remat.nested_forward_narrows import read_by_a_matmul
from hloflops.remat.offloaded_sum_narrows import host_stack_writes, on_host
from hloflops.remat.op_kinds import DUPLICATED, MATMUL_OPCODES, shape_key
from hloflops.remat.sites import Key, SiteKey, SiteOp, one_call_site, source_op
from hloflops.remat.type_corrections import bits
from hloparse.ir import CallRole, Computation, Instruction, Module

# Back from an operand fusion's parameter to `h`: views, moves between memories, slices of a stack.
_PASSES = frozenset({"bitcast", "reshape", "copy", "transpose", "copy-start", "copy-done", "dynamic-slice",
                     "slice", "dynamic-slice-start", "dynamic-slice-done", "async-start", "async-done"})
# The start of an asynchronous read of a stack (the parser reads `dynamic-slice-start` as `async-start`).
_SLICE_STARTS = frozenset({"dynamic-slice-start", "async-start"})
# Chain ops whose result rounds as their operand does (`max(bf16(h), 0) == bf16(max(h, 0))`).
_COMMUTE_WITH_ROUNDING = frozenset({"maximum", "minimum"})
# Operands that carry no value of the chain (relu's zero).
_CONSTANTS = frozenset({"broadcast", "constant"})


def host_stacked_activation_narrows(module: Module, ops: list[SiteOp]) -> dict[SiteKey, int]:
    """The root of each operand fusion computing an activation straight from a host-stacked matmul
    output -> the converts the program without remat may make for it (module docstring)."""
    host_written = host_stack_writes(module)
    if not host_written:
        return {}
    callers = one_call_site(module)
    by_key = {op.key: op for op in ops}
    loop_bodies = {name for _, inst in module.instructions() if inst.opcode == "while"
                   for name in inst.called(CallRole.WHILE_BODY)}
    saved: list[tuple[SiteKey, tuple, bool]] = []
    read_back: list[tuple[SiteKey, tuple, bool]] = []
    for op in ops:
        comp = module.by_name[op.key[0]]
        if op.inst is not comp.root or op.frame not in loop_bodies or op.inst.opcode not in DUPLICATED:
            continue
        site = callers.get(comp.name)
        chain = _chain(comp)
        if site is None or chain is None or not read_by_a_matmul(site[0], site[1].name):
            continue
        param, steps = chain
        if bits(param.shape) != bits(op.inst.shape):
            continue
        seen: list[Instruction] = []

        def passes(step: Instruction) -> bool:
            seen.append(step)
            return step.opcode in _PASSES

        source = source_op(module, callers, by_key, comp, param.name, op.key[2], passes, 64)
        commutes = all(step.opcode in _COMMUTE_WITH_ROUNDING for step in steps)
        entry = (op.key, shape_key(param.shape), commutes)
        if source is not None and source.inst.opcode in MATMUL_OPCODES and any(id(s) in host_written for s in seen):
            saved.append(entry)  # the forward's copy, of `h` it writes into a host stack
        elif source is None and seen and seen[-1].opcode == "get-tuple-element" and \
                any(s.opcode in _SLICE_STARTS and on_host(s.shape) for s in seen):
            read_back.append(entry)  # a recompute's copy, of `h` read back from a host stack
    shapes = {shape for _, shape, _ in saved}
    found: dict[SiteKey, int] = {}
    for key, shape, commutes in saved + [entry for entry in read_back if entry[1] in shapes]:
        found[key] = 2 if commutes else 1
        if commutes and shape in shapes:
            shapes.discard(shape)
            found[key] += 1  # and the narrow of `h` in its matmul's output fusion, once
    return found


def _chain(comp: Computation) -> tuple[Instruction, list[Instruction]] | None:
    """The parameter and the ops from it to the root, where the fusion is one chain: each op reads
    the one before once and otherwise only broadcasts and constants, none a bias add (an `add` of a
    broadcast: hloflops.remat.offloaded_sum_narrows); None otherwise."""
    steps: list[Instruction] = []
    inst = comp.root
    for _ in range(16):
        if inst.opcode == "parameter":
            return (inst, steps) if steps else None
        if inst.opcode not in DUPLICATED or inst.opcode == "convert":
            return None
        operands = [comp.by_name.get(name) for name in inst.operands]
        if any(o is None for o in operands):
            return None
        variable = [o for o in operands if o.opcode not in _CONSTANTS]
        if len(variable) != 1 or inst.opcode == "add" and len(operands) == 2:
            return None
        previous = variable[0]
        users = comp.users.get(previous.name, ())
        if len(users) != 1 or sum(name == previous.name for name in inst.operands) != 1:
            return None
        steps.append(inst)
        inst = previous
    return None


def narrow_elements(module: Module, narrows: Mapping[SiteKey, int]) -> dict[Key, tuple[int, int]]:
    """`RematIndex.twin_narrows`: each op's converts with its result's elements."""
    out: dict[Key, tuple[int, int]] = {}
    for (comp, name, _), n in narrows.items():
        shape = module.by_name[comp].by_name[name].shape
        elements = 1
        for dim in shape.dims:
            elements *= dim
        out[(comp, name)] = (max(out.get((comp, name), (0, 0))[0], n), elements)
    return out
