"""The narrow with which the forward hands a matmul's activation, nested whole in the next
matmul's fusion, to that matmul (after optimization, TPU).

TPU nests an operand's producer inside the fusion of the matmul reading it. Where the forward
stores nothing of a layer's first matmul and activation (a checkpoint recomputes them in the
backward), XLA nests that matmul and the activation chain after it in the next matmul's fusion
and narrows the activation to bf16 for it: an output fusion nested in another, ending in an unnamed
convert. The program without remat keeps the first matmul's output for its backward (the
activation's derivative reads it: gelu's and tanh's input), so its first matmul runs in a fusion of
its own storing the sum, and the next matmul's fusion nests only the activation chain, reading the
stored f32 value and handing the product on wide: no narrow (TPU draws 48 and 1, gelu: convert
-16,384 and -2,097,152 after optimization). So that narrow runs only because of remat. Only where
the chain reads one of its values twice (gelu's `x * f(x)`, whose derivative reads `x`): a chain
of single reads (a bias add alone, `tanh(x + b)`) is saved by its output, which the program
without remat narrows for the next matmul as this one does (TPU draws 2, a whole-model
checkpoint's key projection nested in the scores' fusion, and 13, an offloaded scan's tanh).

Only where the nested fusion holds the matmul (unmarked: the forward's) that the chain reads, a
recompute of that matmul exists (a remat matmul of its result and name inside the checkpoint), and
the outer fusion hands the narrowed value to a matmul. It rests on how XLA fused the program
without remat: in the range, as every fusion rule's op."""

from __future__ import annotations

from hloflops.remat.names import ends_with, inner_tail
from hloflops.remat.op_kinds import DUPLICATED, LAYOUT_VIEWS, MATMUL_OPCODES, NO_WORK_OPERANDS, shape_key
from hloflops.remat.sites import SiteKey, SiteOp, one_call_site
from hloflops.remat.type_corrections import bits
from hloparse.ir import CallRole, Computation, Module



def nested_forward_narrows(module: Module, ops: list[SiteOp], remat: set[SiteKey]) -> set[SiteKey]:
    """The unnamed narrows at the root of a fusion nested in a matmul's fusion that narrow a chain
    computed from a forward matmul of the nested fusion, which a recompute recomputes (module
    docstring)."""
    callers = one_call_site(module)
    fused = {callee for _, inst in module.instructions() if inst.opcode == "fusion"
             for callee in inst.called(CallRole.FUSION)}
    recomputed = [op for op in ops if op.key in remat and op.marked and op.inst.opcode in MATMUL_OPCODES]
    by_key = {op.key: op for op in ops}
    out: set[SiteKey] = set()
    for op in ops:
        inst = op.inst
        if op.marked or op.key in remat or inst.opcode != "convert":
            continue
        comp = module.by_name[op.key[0]]
        site = callers.get(comp.name)
        if comp.root is not inst or site is None or site[0].name not in fused:
            continue
        source = comp.by_name.get(inst.operands[0]) if inst.operands else None
        if source is None or not 0 < bits(inst.shape) < bits(source.shape):
            continue
        matmul = _forward_matmul(comp, source.name, by_key, op.key[2])
        if matmul is None or not read_by_a_matmul(site[0], site[1].name):
            continue
        tail_of = {id(r): inner_tail(r.op_name) for r in recomputed if r.op_name}
        if any(tail_of.get(id(r)) and shape_key(r.inst.shape) == shape_key(matmul.inst.shape)
               and ends_with(matmul.op_name, tail_of[id(r)]) for r in recomputed):
            out.add(op.key)
    return out


def chain_matmul(comp: Computation, name: str, by_key: dict[SiteKey, SiteOp],
                 site: int) -> tuple[SiteOp | None, set[str]]:
    """The one unmarked, named matmul of the fusion that an unmarked elementwise chain from `name`
    reads (None where the chain reads anything else computed: a marked op, an expensive op), and
    the values the walk passed."""
    found: list[SiteOp] = []
    pending, seen = [name], set()
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        step = comp.by_name.get(current)
        if step is None or step.opcode in NO_WORK_OPERANDS:
            continue
        if step.opcode in LAYOUT_VIEWS:
            pending += step.operands
            continue
        op = by_key.get((comp.name, current, site))
        if op is None or op.marked:
            return None, seen
        if step.opcode in MATMUL_OPCODES:
            found.append(op)
        elif step.opcode in DUPLICATED:
            pending += step.operands
        else:
            return None, seen
    return (found[0] if len(found) == 1 and found[0].op_name else None), seen


def _forward_matmul(comp: Computation, name: str, by_key: dict[SiteKey, SiteOp], site: int) -> SiteOp | None:
    """The unmarked matmul of the fusion an unmarked elementwise chain from `name` reads (one)."""
    matmul, seen = chain_matmul(comp, name, by_key, site)
    if matmul is None:
        return None
    # The activation reads a value of the chain twice (gelu's `x * f(x)`): its derivative reads
    # that value, which the program without remat stores wide. A chain of single reads (a bias
    # add, `tanh(x + b)`) is saved by its output, which that program narrows as this one does.
    chain = seen - {name for name in seen
                    if comp.by_name.get(name) is None or comp.by_name[name].opcode in NO_WORK_OPERANDS}
    if not any(sum(user.name in chain for user in comp.users.get(value, ())) > 1 for value in chain):
        return None
    return matmul


def read_by_a_matmul(outer: Computation, name: str) -> bool:
    """Does a matmul of the outer fusion read the nested fusion's value (through views)?"""
    values = [name]
    while values:
        for user in outer.users.get(values.pop(), ()):
            if user.opcode in MATMUL_OPCODES:
                return True
            if user.opcode in LAYOUT_VIEWS:
                values.append(user.name)
    return False
