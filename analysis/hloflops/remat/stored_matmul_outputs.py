"""A matmul's biased output the recompute stores narrowed, where the forward fuses it on unstored
(after optimization, TPU).

TPU computes a bf16 layer's `h = x @ w + b` in f32 inside the matmul's fusion: it widens the
matmul's output and the bias, adds, and narrows `h` where it leaves the fusion. Under a checkpoint
the backward reads the recompute's `h`, so the forward's `h` has one reader, the activation that
the next matmul reads, and XLA fuses the first matmul, its bias add and the activation into the
next matmul's operand fusion: `h` is never narrowed there. The recompute computes `h` in a fusion
of its own and stores it narrowed, read by the backward's fusions (the activation's copy for the
next weight's gradient, its derivative), each widening it. The program without remat keeps `h`
for its backward: its forward computes it in a fusion like the recompute's (the same widens, add
and narrow), and every reader, its forward's next matmul among them, widens the stored value.

So, value by value, the recompute's fusion is that program's storing fusion, and the backward's
readers of the stored `h` are its readers too, converts and all; the forward's fusion runs the add
and the widens of the matmul's output and the bias where that program's forward reader widens `h`
once: one widen more, the only convert remat adds (the add is the pairing's, one for one). The
pairing counts the recompute's widens of the matmul's output and the bias (their forward copies
share their value numbers), the narrow of `h` and the readers' widens and narrows by signature and
by value, and the forward's narrow of the activation nested in the next matmul
(hloflops.remat.activation_output_narrows); all but the widen of the matmul's output are the
program without remat's (TPU draws 29, 104, 186, 199, 217: an lm's MLP `Dense_0` under a `none`
policy in bf16, gelu, tanh and relu alike, convert +5 copies of `h`'s size per layer before).

The sign in this program: a remat-counted matmul whose fusion hands out the narrowed sum of its
widened output and another value, and a forward op of the matmul's opcode, shape and name inside
the checkpoint in a fusion (at any depth under the forward's) that hands out no narrow of its sum
(the forward reads it on, unstored). Every cached TPU draw 0-239 with that sign (the five above)
has the program without remat store `h` narrowed in its forward. Not in a loop body of the
backward whose forward runs in another loop (a scan's: the program without remat stacks `h` in
its forward loop, with its own fusion; the stack rules answer there)."""

from __future__ import annotations

from typing import Iterable

from hloflops.remat.names import ends_with, inner_tail, is_remat_named
from hloflops.remat.op_kinds import LAYOUT_VIEWS, MATMUL_OPCODES, shape_key
from hloflops.remat.readers import output_readers
from hloflops.remat.sites import SiteKey, SiteOp, one_call_site
from hloflops.remat.type_corrections import bits, is_widen
from hloflops.scopes import phase
from hloparse.ir import CallRole, Computation, Instruction, Module


def stored_matmul_output_converts(module: Module, ops: list[SiteOp], remat: set[SiteKey],
                                  backward_loops: set[str]) -> set[SiteKey]:
    """The converts in `remat` the program without remat runs too, around each matmul output the
    recompute stores narrowed and the forward fuses on (see the module's docstring)."""
    callers = one_call_site(module)
    by_name: dict[tuple[str, str], list[SiteKey]] = {}
    for op in ops:
        by_name.setdefault(op.key[:2], []).append(op.key)
    forward = [op for op in ops if not op.marked and op.inst.opcode in MATMUL_OPCODES and op.op_name
               and phase(op.op_name) == "forward"]
    model: set[SiteKey] = set()
    for op in ops:
        if op.key not in remat or not op.marked or op.inst.opcode not in MATMUL_OPCODES or op.frame in backward_loops:
            continue
        comp = module.by_name.get(op.key[0])
        site = callers.get(op.key[0])
        if comp is None or site is None:
            continue
        stored = _stored_sum(comp, op.inst)
        if stored is None:
            continue
        narrow, widen = stored
        tail = inner_tail(op.op_name)
        copies = [f for f in forward if f.inst.opcode == op.inst.opcode and ends_with(f.op_name, tail)
                  and shape_key(f.inst.shape) == shape_key(op.inst.shape) and _fused_on(module, f)]
        if len(tail) < 2 or not copies:
            continue
        # The storing fusion's converts but the widen of the matmul's output.
        for inst in comp.instructions:
            if inst.opcode == "convert" and inst.name != widen:
                model.update(k for k in by_name.get((comp.name, inst.name), ()) if k in remat)
        # The converts of the backward's fusions reading the stored value (and of the fusions
        # nested in them). Not a recompute's (a whole-model checkpoint's recomputed next matmul,
        # TPU draw 104): the program without remat recomputes nothing there.
        frame, fusion = site
        outputs = [comp.root.operands.index(narrow)] if comp.root.opcode == "tuple" else None
        for reader in output_readers(frame, fusion, outputs, through=LAYOUT_VIEWS, fusions_only=True):
            if is_remat_named(reader):
                continue
            for body in _bodies(module, reader):
                for inst in body.instructions:
                    if inst.opcode == "convert":
                        model.update(k for k in by_name.get((body.name, inst.name), ()) if k in remat)
        # The forward's narrows of what its fusion computes from the unstored sum (the activation's).
        for f in copies:
            body = module.by_name[f.key[0]]
            for inst in body.instructions:
                if inst.opcode == "convert" and not is_widen(body, inst.name):
                    model.update(k for k in by_name.get((body.name, inst.name), ()) if k in remat)
    return model


def _stored_sum(comp: Computation, matmul: Instruction) -> tuple[str, str] | None:
    """(narrow, widen) where the fusion hands out `narrow(add(widen(matmul), ...))`."""
    outputs = set(comp.root.operands) if comp.root.opcode == "tuple" else {comp.root.name}
    for widen in comp.users.get(matmul.name, ()):
        if not is_widen(comp, widen.name):
            continue
        for add in comp.users.get(widen.name, ()):
            if add.opcode != "add":
                continue
            for narrow in comp.users.get(add.name, ()):
                if narrow.opcode == "convert" and 0 < bits(narrow.shape) < bits(add.shape) and narrow.name in outputs:
                    return narrow.name, widen.name
    return None


def _fused_on(module: Module, op: SiteOp) -> bool:
    """Does the forward's copy of the matmul add to its widened output and read the sum on in its
    fusion, handing out no narrow of it (the forward stores no `h`)?"""
    comp = module.by_name.get(op.key[0])
    if comp is None:
        return False
    outputs = set(comp.root.operands) if comp.root.opcode == "tuple" else {comp.root.name}
    for widen in comp.users.get(op.inst.name, ()):
        if not is_widen(comp, widen.name):
            continue
        for add in comp.users.get(widen.name, ()):
            if add.opcode != "add" or add.name in outputs:
                continue
            users = comp.users.get(add.name, ())
            if users and not any(u.opcode == "convert" and u.name in outputs for u in users):
                return True
    return False


def _bodies(module: Module, fusion: Instruction) -> Iterable[Computation]:
    """The fusion's computation and the fusions nested in it."""
    todo = list(fusion.called(CallRole.FUSION))
    while todo:
        body = module.by_name.get(todo.pop())
        if body is None:
            continue
        yield body
        todo.extend(c for inst in body.instructions if inst.opcode == "fusion" for c in inst.called(CallRole.FUSION))
