"""A recomputed residual the program without remat computes twice in its forward (TPU, no loop;
hloflops.remat.by_platform's `tpu_rules` calls `split_residual_copies` last).

A layer norm's `r = rsqrt(var / n + eps)` is read twice by the gradient: by the forward chain
`(x - mean) * r` (nested in the next layer's matmul fusions, and copied into the weight gradients'
fusions that rebuild their input) and by the transpose's own `ct * r` (the input gradient). Where
jax differentiates inside a function the step calls (an unrolled gradient accumulation's
per-microbatch gradient, `jit(step)/closed_call/jvp()/...`), TPU's program without remat keeps the
residuals it hands to its backward in jax's shape (`[b, t, 1]`, kept dimensions) while its
forward's fusions read `r` unit-free: its forward computes the rsqrt twice, which CSE cannot merge
(`rsqrt_bitcast_fusion` beside the forward's own; TPU draws 48, 54 and held-out 119: 12 to 24
unit-dimension rsqrts there, none in the program with remat; no other loop-free TPU draw of 0-119 splits
so). Here the recompute and the backward run in one computation and the recompute computes `r`
once, in one fusion that recomputed ops and the transpose's own op both read (through a
broadcast: a per-row statistic): that copy stands for the second forward copy of the program
without remat, so its ops are model FLOPs. Not for a statistic no backward op reads (the first
layer's norm, with no input gradient: both programs compute it once in their forward), not where
the loss is differentiated at the top of the program (TPU 27: that program computes `r` once for
its matmuls and its backward alike), not in a module with a loop (a scan's backward loop reads
stored residuals: hloflops.remat.backward_loop_copies), and only for a fusion of recomputes alone
whose output is a marked expensive op counted remat. Where CSE merged the recompute into the
forward (no `prevent_cse`), the transpose reads the forward's own statistic: the program without
remat still computes it once more, so each op of that chain lowers the range's low end by one copy
(`unsplit_residual_copies`, `twin_copies`; held-out TPU 119: truth -1,536, the low end now).
What makes XLA keep the unit dimensions in that program only is not visible in this one: the gate
is the call around the differentiation, which all three draws that split share and no other draw
has."""

from __future__ import annotations

from typing import Iterator

from hloflops.remat.op_kinds import DUPLICATED, EXPENSIVE, MATMUL_OPCODES
from hloflops.remat.sites import SiteKey, SiteOp
from hloflops.scopes import phase
from hloparse.ir import CallRole, Computation, Instruction, Module, parameter_number

# Ops that hand a value on without computing on it (a reader's first use of a stored value).
_VIEWS = frozenset({"bitcast", "reshape", "broadcast", "copy", "transpose", "convert",
                    "copy-start", "copy-done", "get-tuple-element"})


def split_residual_copies(module: Module, ops: list[SiteOp], remat: set[SiteKey]) -> set[SiteKey]:
    """The remat ops of each recompute fusion of the entry whose one output (a marked expensive
    recompute, through views) both a recomputed op and a backward op of the transpose's own read
    (module docstring): model FLOPs. Empty in a module with a loop."""
    if not differentiated_inside_a_call(module):
        return set()
    by_inst = _by_instruction(ops)
    found: set[SiteKey] = set()
    statistics: set[str] = set()  # what the statistics found are computed from
    for inst, root, own, kinds in _statistics(module, ops, by_inst):
        if all(op.marked for op in own) and any(op.inst.name == root and op.key in remat for op in own) \
                and {"recompute", "backward"} <= kinds:
            found |= {op.key for op in own if op.key in remat}
            statistics |= set(inst.operands)
    # The coefficient's fusion reading the same statistic (`rsqrt(v) / v * -0.5` times the
    # cotangent): a gradient fusion the program without remat has too, with its own copy of the chain.
    for inst in module.entry.instructions:
        if inst.opcode == "fusion" and statistics & set(inst.operands):
            found |= _gradient_copies(module, inst, by_inst, remat)
    return found


def unsplit_residual_copies(module: Module, ops: list[SiteOp], remat: set[SiteKey],
                            twin_copies: dict[SiteKey, int]) -> None:
    """Where the program computes such a statistic only in its forward, one fusion read (through a
    broadcast) by forward ops and by the transpose's own alike (CSE merged the recompute into the
    forward: no recompute left to stand for the second copy), the program without remat computes
    it once more (module docstring): `twin_copies[key] += 1` for each op of that fusion's chain,
    lowering the range's low end only (held-out TPU 119). Same gate as `split_residual_copies`."""
    if not differentiated_inside_a_call(module):
        return
    for _, _, own, kinds in _statistics(module, ops, _by_instruction(ops)):
        if {"forward", "backward"} <= kinds and not any(op.marked or op.key in remat for op in own):
            for op in own:
                twin_copies[op.key] = twin_copies.get(op.key, 0) + 1


def _gradient_copies(module: Module, inst: Instruction, by_inst, remat: set[SiteKey]) -> set[SiteKey]:
    """The remat ops of a fusion whose outputs are all the backward's own (unmarked, of the
    transpose), nothing nested and no matmul in it; empty for any other fusion."""
    comp = module.by_name.get(next(iter(inst.called(CallRole.FUSION)), ""))
    if comp is None or any(i.opcode in MATMUL_OPCODES or i.opcode == "fusion" for i in comp.instructions):
        return set()
    root = comp.root
    outputs = [op for name in (root.operands if root.opcode == "tuple" else (root.name,))
               for op in by_inst.get((comp.name, name), ())]
    if not outputs or any(op.marked or phase(op.op_name) != "backward" for op in outputs):
        return set()
    return {op.key for i in comp.instructions for op in by_inst.get((comp.name, i.name), ())
            if op.marked and op.key in remat and i.opcode in DUPLICATED}


def differentiated_inside_a_call(module: Module) -> bool:
    """Does jax differentiate inside a function the program calls (a gradient accumulation's
    per-microbatch gradient: `jit(step)/closed_call/jvp()/...`), with no loop in the module?"""
    found = False
    for _, inst in module.instructions():
        if inst.opcode == "while":
            return False
        if not found:
            frames = inst.op_name.split("/")
            first = next((i for i, frame in enumerate(frames) if frame.startswith(("jvp(", "transpose("))), None)
            found = first is not None and first > 1
    return found


def _reads_parameters(comp: Computation) -> set[str]:
    """The ops of the fusion computed from its parameters (not a widen of a constant)."""
    found: set[str] = set()
    for inst in comp.instructions:  # in text order: operands first
        if inst.opcode == "parameter" or any(name in found for name in inst.operands):
            found.add(inst.name)
    return found


def _by_instruction(ops: list[SiteOp]) -> dict[tuple[str, str], list[SiteOp]]:
    by_inst: dict[tuple[str, str], list[SiteOp]] = {}
    for op in ops:
        by_inst.setdefault(op.key[:2], []).append(op)
    return by_inst


def _statistics(module: Module, ops: list[SiteOp], by_inst
                ) -> Iterator[tuple[Instruction, str, list[SiteOp], set[str]]]:
    """Each fusion of the entry (one call site) whose one output is an expensive op through
    views: the fusion, that op's name, its ops computed from its parameters, and its readers'
    kinds (`_reader_kinds`)."""
    by_comp: dict[str, list[SiteOp]] = {}
    for op in ops:
        by_comp.setdefault(op.key[0], []).append(op)
    entry = module.entry
    users = entry.users
    for inst in entry.instructions:
        if inst.opcode != "fusion" or inst.shape.is_tuple:
            continue
        body = inst.called(CallRole.FUSION)
        if len(body) != 1 or body[0] not in module.by_name:
            continue
        comp = module.by_name[body[0]]
        variable = _reads_parameters(comp)
        own = [op for op in by_comp.get(comp.name, ()) if op.inst.opcode in DUPLICATED and op.inst.name in variable]
        root = _expensive_root(comp)
        if not own or root is None or len({op.key[2] for op in own}) != 1:
            continue
        yield inst, root, own, set(_reader_kinds(module, entry, inst, users, by_inst))


def _expensive_root(comp: Computation) -> str | None:
    """The fusion's output's expensive op, through views (None if it is none)."""
    inst = comp.root
    for _ in range(8):
        if inst.opcode in EXPENSIVE:
            return inst.name
        if inst.opcode not in _VIEWS or len(inst.operands) != 1:
            return None
        inst = comp.by_name[inst.operands[0]]
    return None


def _reader_kinds(module: Module, comp: Computation, inst: Instruction, users, by_inst,
                  broadcast: bool = False, depth: int = 0) -> Iterator[str]:
    """Of each op computing on `inst`'s value in `comp` (through views, into fusions): 'recompute'
    for a marked one, 'backward' for an unmarked one of the transpose, 'forward' for an unmarked
    one of the forward, each only where the value reached it through a broadcast (read as a
    per-row statistic), else 'other'."""
    if depth > 4:
        yield "other"
        return
    for user in users.get(inst.name, ()):
        if user.opcode in _VIEWS:
            yield from _reader_kinds(module, comp, user, users, by_inst,
                                     broadcast or user.opcode == "broadcast", depth + 1)
        elif user.opcode == "fusion":
            body = module.by_name.get(next(iter(user.called(CallRole.FUSION)), ""))
            if body is None:
                yield "other"
                continue
            params = {parameter_number(p): p for p in body.instructions if p.opcode == "parameter"}
            for index, name in enumerate(user.operands):
                if name == inst.name and index in params:
                    yield from _reader_kinds(module, body, params[index], body.users, by_inst,
                                             broadcast, depth + 1)
        elif user.opcode in DUPLICATED and broadcast:
            ops = by_inst.get((comp.name, user.name), [])
            if ops and all(op.marked for op in ops):
                yield "recompute"
            elif ops and phase(ops[0].op_name) == "backward" and not any(op.marked for op in ops):
                yield "backward"
            elif ops and phase(ops[0].op_name) == "forward" and not any(op.marked for op in ops):
                yield "forward"
            else:
                yield "other"
        else:
            yield "other"
