"""The narrows the program without remat makes of a stored `x @ w + b` that this program offloads
bare (after optimization; TPU's host memory): a low end for the range.

An offload policy saves a matmul's bare output `h = x @ w` (hloflops.remat.offloaded_residuals):
every matmul reading the activation `act(h + b)` nests the bias add and the activation in an
operand fusion of its own, in f32, reading `h` and `b`. The program without remat fuses the bias
add into the matmul's output fusion and stores the sum; its readers nest the activation alone,
reading the one stored value, and where the activation reads each value once (relu, tanh) TPU may
narrow it to bf16 inside that operand fusion for the matmul (a chain reading a value twice, gelu's
`s * f(s)`, it hands on wide: TPU draw 9, as hloflops.remat.nested_forward_narrows found). TPU
draw 51 (hk_loop, offload, relu): six such narrows of `relu(sum)` in the program without remat
(three forward matmuls, three weight gradients), none here: convert truth -6,144, below anything
a split of this program's ops can report. Whether TPU narrows an operand fusion rests on how it
fused that program (TPU draw 47 nests `relu(h + b)` in both programs, narrowing in neither): so
each nested activation here stands for one narrow the program without remat may make
(`twin_copies`, lowering the range's low end only), never a count.

Only where the program offloads a value to the host, and the nested fusion (its root not a
narrow) sits inside a fusion whose matmul reads it, computes `add(h, broadcast(b))` with `h` a
matmul's output that is copied to the host (through views and fusion boundaries), and every op
from the add to its root reads the one before once.

`stored_sum_narrows`: the same for `h` a loop's device stack keeps wide (a saveable policy, no
offload), with the twin's widen and narrow in each relu copy (TPU draws 40, 83)."""

from __future__ import annotations

from hloflops.remat.moved_values import HOST_MEMORY_SPACE
from hloflops.remat.nested_forward_narrows import read_by_a_matmul
from hloflops.remat.offloaded_residuals import offloads
from hloflops.remat.op_kinds import DUPLICATED, EXPENSIVE, LAYOUT_VIEWS, MATMUL_OPCODES, is_identity_rounding, shape_key
from hloflops.remat.sites import SiteKey, SiteOp, one_call_site, source_op
from hloflops.remat.type_corrections import bits
from hloparse.ir import CallRole, Computation, Instruction, Module, Shape

# Back from a copy to the host: views, and a copy between the device's memories before it.
_BACK = LAYOUT_VIEWS | {"copy-start", "copy-done"}
_PASSES = frozenset({"bitcast", "reshape", "copy", "transpose", "copy-start", "copy-done", "dynamic-slice", "slice"})


def offloaded_sum_narrows(module: Module, ops: list[SiteOp]) -> dict[SiteKey, int]:
    """The root of each operand fusion nesting a bias add of an offloaded matmul output -> 1 (one
    narrow the program without remat may make there; module docstring)."""
    if not offloads(module):
        return {}
    offloaded = _offloaded_values(module)
    callers = one_call_site(module)
    by_key = {op.key: op for op in ops}
    found: dict[SiteKey, int] = {}
    for op in ops:
        inst = op.inst
        if inst.opcode != "add" or len(inst.operands) != 2:
            continue
        comp = module.by_name[op.key[0]]
        site = callers.get(comp.name)
        root = comp.root
        if site is None or root is None or not read_by_a_matmul(site[0], site[1].name) or \
                root.opcode == "convert" or bits(root.shape) != bits(inst.shape):
            continue
        if not _single_reads(comp, inst):
            continue
        other = _unbroadcast_operand(comp, inst)
        if other is None:
            continue
        seen: list[Instruction] = []

        def passes(step: Instruction) -> bool:
            seen.append(step)
            return step.opcode in _PASSES

        source = source_op(module, callers, by_key, comp, other.name, op.key[2], passes, 64)
        if source is None or source.inst.opcode not in MATMUL_OPCODES or not any(id(s) in offloaded for s in seen):
            continue
        key = (comp.name, root.name, op.key[2])
        if key in by_key:
            found[key] = 1
    return found


def _unbroadcast_operand(comp: Computation, add: Instruction) -> Instruction | None:
    """The operand of a bias add that is not its broadcast (the matmul output's side); None unless
    exactly one operand is a broadcast."""
    operands = [comp.by_name.get(name) for name in add.operands]
    if any(o is None for o in operands) or sum(o.opcode == "broadcast" for o in operands) != 1:
        return None
    return next(o for o in operands if o.opcode != "broadcast")


def _single_reads(comp: Computation, add: Instruction) -> bool:
    """Is the fusion a chain from the bias add to its root of ops each read once (relu's
    `max(s, 0)`, `tanh(s)`)? A chain reading a value twice (gelu's `s * f(s)`) the program without
    remat hands on wide from the stored sum (hloflops.remat.nested_forward_narrows)."""
    step = add
    while step is not comp.root:
        users = comp.users.get(step.name, ())
        if len(users) != 1 or sum(operand == step.name for operand in users[0].operands) != 1:
            return False
        step = users[0]
    return True


def _offloaded_values(module: Module) -> set[int]:
    """The instructions (by id) whose value a `copy-start` copies to the host, through views."""
    out: set[int] = set()
    for comp, inst in module.instructions():
        if inst.opcode != "copy-start" or not inst.operands or not _to_host(inst):
            continue
        name = inst.operands[0]
        for _ in range(16):
            source = comp.by_name.get(name)
            if source is None:
                break
            out.add(id(source))
            if source.opcode not in _BACK or not source.operands:
                break
            name = source.operands[0]
    return out


def _to_host(inst: Instruction) -> bool:
    """Does a `copy-start` copy a device value to the host (its destination, the tuple's first
    element, in the host's memory space)?"""
    parts = inst.shape.tuple_shapes if inst.shape.is_tuple else ()
    return len(parts) > 1 and parts[0].layout is not None and parts[0].layout.memory_space == HOST_MEMORY_SPACE


# Back from a type-corrected op to the residual it reads: views, moves between memories (a copy, an
# asynchronous slice of a host stack: `async-start` / `async-done`), slices.
_TO_RESIDUAL = _PASSES | {"async-start", "async-done"}
_CORRECTED = "float_type_correction_info"


def offloaded_source_narrows(module: Module, ops: list[SiteOp]) -> dict[SiteKey, int]:
    """The narrows of a type-corrected cheap op reading an offloaded matmul output wide -> how many
    converts the program without remat may run beyond this program's for them: a low end for the
    range (`twin_copies`).

    TPU computes a bf16 elementwise op in f32 and narrows its result (relu's `max` carries
    `float_type_correction_info`, its one reader a `convert` to bf16). Where it reads a matmul's f32
    output `h` that an offload policy sends to the host (a scan's host stack, a `copy-start` to
    memory space 5), this program must keep `h` wide, and each copy of the op (the forward's, the
    recompute's, reading `h` back from the host) reads it wide: one narrow each. The program without
    remat stores the op's output for its backward, not `h`; TPU may narrow `h` in the matmul's
    output fusion, which every reader reads narrowed, and widen it in each copy of the op: one
    narrow of `h` and one widen per copy more (held-out TPU draw 114, a scan of relu MLPs under
    `save_and_offload_only_these_names`: convert truth -9,216, three converts of `[8, 128]` per
    layer, below anything a split of this program's ops reaches). Only in a loop's body (a scan's):
    there the program without remat stores in its stacks the residuals jax's scan chose (relu's
    output, its mask), not `h`; without a loop XLA sees the whole program and stores `h` wide for
    the gradient fusions that recompute relu from it, narrowing nothing (held-out TPU draw 87, a
    Python loop). Whether TPU narrows `h` rests on
    how it fused that program (a sum an all-reduce hands out it reads wide: held-out TPU draw 88,
    left out here as its source is no matmul): each copy's narrow stands for one widen, the
    forward's for one narrow of `h` more, never a count."""
    host_written = host_stack_writes(module)
    if not host_written:
        return {}
    callers = one_call_site(module)
    by_key = {op.key: op for op in ops}
    loop_bodies = {name for _, inst in module.instructions() if inst.opcode == "while"
                   for name in inst.called(CallRole.WHILE_BODY)}
    found: dict[SiteKey, int] = {}
    sources: dict[int, SiteKey] = {}
    read_back: list[tuple[SiteKey, tuple]] = []
    for op in ops:
        inst = op.inst
        if inst.opcode != "convert" or op.op_name or len(inst.operands) != 1:
            continue
        comp = module.by_name[op.key[0]]
        source = comp.by_name.get(inst.operands[0])
        if source is None or source.opcode not in DUPLICATED or source.opcode in EXPENSIVE or \
                _CORRECTED not in source.attributes.get("backend_config", "") or \
                len(comp.users.get(source.name, ())) != 1 or not 0 < bits(inst.shape) < bits(source.shape):
            continue
        reads = [comp.by_name.get(name) for name in source.operands]
        wide = [r for r in reads if r is not None and r.opcode == "parameter"]
        if len(wide) != 1 or bits(wide[0].shape) != bits(source.shape) or \
                any(r is None or r.opcode not in ("parameter", "broadcast", "constant") for r in reads):
            continue
        seen: list[Instruction] = []

        def passes(step: Instruction) -> bool:
            seen.append(step)
            return step.opcode in _TO_RESIDUAL

        residual = source_op(module, callers, by_key, comp, wide[0].name, op.key[2], passes, 64)
        if residual is not None and residual.inst.opcode not in MATMUL_OPCODES:
            continue  # a sum an all-reduce hands out, a value computed elementwise: not a matmul's output
        if any(on_host(s.shape) for s in seen):
            read_back.append((op.key, shape_key(inst.shape)))
            continue
        written = next((id(s) for s in seen if id(s) in host_written), None)
        if written is not None and residual is not None and op.frame in loop_bodies:
            found[op.key] = found.get(op.key, 0) + 1  # the twin's widen in this copy
            if written not in sources:
                sources[written] = op.key  # and its narrow of `h`, once
                found[op.key] += 1
    shapes = {shape_key(by_key[key].inst.shape) for key in found}
    for key, shape in read_back:  # a recompute's copy reading `h` back: one widen, of a residual found above
        if shape in shapes:
            found[key] = found.get(key, 0) + 1
    return found


def read_from_host(module: Module, callers, by_key, comp: Computation, name: str, site: int) -> bool:
    """Is the value `name` read back from the host's memory space (a round trip's `copy-done`, an
    asynchronous slice of a host stack), through views, moves and fusion boundaries?"""
    seen: list[Instruction] = []

    def passes(step: Instruction) -> bool:
        seen.append(step)
        return step.opcode in _TO_RESIDUAL

    source_op(module, callers, by_key, comp, name, site, passes, 64)
    return any(on_host(s.shape) for s in seen)


def on_host(shape: Shape) -> bool:
    if shape.is_tuple:
        return any(on_host(part) for part in shape.tuple_shapes)
    return shape.layout is not None and shape.layout.memory_space == HOST_MEMORY_SPACE


def host_stack_writes(module: Module) -> set[int]:
    """The device values (by id, and the values they view) that an instruction writes into the
    host's memory space (a `copy-start` to it, an asynchronous update of a host stack)."""
    out: set[int] = set()
    for comp, inst in module.instructions():
        if not on_host(inst.shape):
            continue
        for name in inst.operands:
            for _ in range(16):
                source = comp.by_name.get(name)
                if source is None or on_host(source.shape) or not source.shape.dims or source.opcode == "parameter":
                    break
                out.add(id(source))
                if source.opcode not in _BACK or not source.operands:
                    break
                name = source.operands[0]
    return out


def stored_sum_narrows(module: Module, ops: list[SiteOp]) -> dict[SiteKey, int]:
    """The converts the program without remat may run beyond this program's where a policy saves a
    matmul's bare output `h = x @ w` wide in a loop's device stack (a scan's, a layer stack's) and
    every copy of `act(h + b)` nests the bias add and the activation in an operand fusion of its
    matmul (the forward's, the recompute's reading `h` back from the stack): root -> 2, and 1 more
    once per shape of `h` (`twin_copies`, lowering the range's low end only).

    This program computes `relu(h + b)` in f32 and narrows nothing. The program without remat
    stores relu's output (and its mask), not `h`: TPU may fuse the bias add into the matmul's output
    fusion and narrow the sum there once, and widen it and narrow relu's result in each copy of the
    activation (held-out TPU draw 83, a layer stack of relu MLPs under
    `dots_with_no_batch_dims_saveable`: convert truth -640, five converts of `[2, 32]` per layer,
    below anything a split of this program's ops reaches). A forward copy that narrows relu's
    result for its reader (`bitcast(convert(max(h + b, 0)))`, a fusion of its own) makes the twin's
    narrow itself: its widen alone stands for one (TPU draw 40, dots_saveable: range [0, 6,144]
    missed truth -3,072; the twin's three converts of `[8, 64]` a layer more). The same mechanism as
    `offloaded_source_narrows` for a value the device keeps: only in a loop's body (without a loop
    XLA sees the whole program and may keep `h` wide: held-out TPU draw 87); whether TPU narrows
    rests on how it fused that program, so each stands for converts it may make, never a count.
    An offload policy's `h` a scan writes into a host stack a step at a time (an asynchronous
    `dynamic-update-slice` into memory space 5, read back by an asynchronous slice) is saved alike:
    held-out TPU draw 144 (nnx_scan, relu, `offload_dot_with_no_batch_dims`), the twin's five
    converts of `[4, 64]` a layer, convert truth -2,304 below the range [0, 1,536]."""
    offloaded = _offloaded_values(module)
    host_stacked = host_stack_writes(module)  # `h` a scan writes into a host stack (an offload policy's)
    callers = one_call_site(module)
    by_key = {op.key: op for op in ops}
    loop_bodies = {name for _, inst in module.instructions() if inst.opcode == "while"
                   for name in inst.called(CallRole.WHILE_BODY)}
    found: dict[SiteKey, int] = {}
    saved: list[tuple[SiteKey, tuple, int]] = []
    read_back: list[tuple[SiteKey, tuple, int]] = []
    for op in ops:
        inst = op.inst
        if inst.opcode != "add" or len(inst.operands) != 2 or op.frame not in loop_bodies:
            continue
        comp = module.by_name[op.key[0]]
        site = callers.get(comp.name)
        root = comp.root
        if site is None or root is None or root is inst or not _single_reads(comp, inst):
            continue
        narrow = _narrowed_root(comp, inst)
        if narrow is None and (not read_by_a_matmul(site[0], site[1].name) or bits(root.shape) != bits(inst.shape)):
            continue
        other = _unbroadcast_operand(comp, inst)
        if other is None:
            continue
        seen: list[Instruction] = []

        def passes(step: Instruction) -> bool:
            seen.append(step)
            return step.opcode in _PASSES or step.opcode in _STACK_READS or is_identity_rounding(step)

        source = source_op(module, callers, by_key, comp, other.name, op.key[2], passes, 64)
        if any(id(s) in offloaded for s in seen):
            continue  # an offloaded `h`: offloaded_sum_narrows
        key = (comp.name, (narrow or root).name, op.key[2])
        if key not in by_key:
            continue
        # The twin's widen of the stored sum in this copy, and its narrow of the activation where
        # this copy hands it on wide (one narrowing it for its reader makes the twin's own).
        entry = (key, shape_key(inst.shape), 1 if narrow is not None else 2)
        if source is not None and source.inst.opcode in MATMUL_OPCODES and \
                any(is_identity_rounding(s) or id(s) in host_stacked for s in seen):
            saved.append(entry)  # the forward's copy, of `h` the policy saves (on the device or the host)
        elif source is None and seen[-1].opcode == "get-tuple-element" and \
                any(s.opcode == "dynamic-slice" or s.opcode in _STACK_READS and on_host(s.shape) for s in seen):
            read_back.append(entry)  # a recompute's copy, of `h` read from a loop's stack
    shapes = {shape for _, shape, _ in saved}
    for key, shape, n in saved + [entry for entry in read_back if entry[1] in shapes]:
        found[key] = n
        if shape in shapes:
            shapes.discard(shape)
            found[key] += 1  # and its narrow of `h + b` in the matmul's output fusion, once
    return found


# An asynchronous slice of a loop's stack (a scan's host stack, read back a step at a time; the
# parser reads `dynamic-slice-start` / `-done` as `async-start` / `async-done`).
_STACK_READS = frozenset({"dynamic-slice-start", "dynamic-slice-done", "async-start", "async-done"})


def _narrowed_root(comp: Computation, add: Instruction) -> Instruction | None:
    """The convert narrowing the fusion's result below the bias add's width, its root through views
    (`bitcast(convert(max(s, 0)))`: the activation narrowed for a matmul reading it), else None."""
    step = comp.root
    while step is not None and step.opcode in LAYOUT_VIEWS and step.operands:
        step = comp.by_name.get(step.operands[0])
    if step is None or step.opcode != "convert" or step is add or not 0 < bits(step.shape) < bits(add.shape):
        return None
    return step
