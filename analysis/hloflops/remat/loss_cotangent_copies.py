"""The loss's cotangent, which TPU's fusion hands out of the loss's fusion here and the program
without remat may copy into each reader (hloflops.remat.pairing calls `loss_cotangent_copies`).

The backward starts from the cotangent of the loss's mean, `y * (2 / n)` (jax names it
`transpose(jvp())/mul;.../broadcast_in_dim`), read by the first gradient fusions: the last
matmul's input and weight gradients and the residual's gradient. It reads nothing but the
forward's output `y`, which the loss's own fusion computes for its reduce. XLA's multi-output
fusion may merge the cotangent into that fusion as a second output beside the loss
(`(y * c, sum(y * y))`): it runs once and its k readers read it stored. Where this program does so,
the program without remat sometimes hands out `y` instead and copies the cheap multiply into each
of its k readers (TPU draws 0, 4, 17, 22, 27, 48, 50, 55: the twin runs it once per reader of this
program's hand-out), and sometimes merges it alike and runs it once (TPU 42 and unseen draws 141,
179: the same structure here, no copy there). Nothing in this program tells the two apart, so the
k - 1 copies are a `twin_copies` hinge: they lower the range's low end, never the split. Not where
the cotangent is handed out of a backward fusion of its own (the residual add and the cotangent,
without the loss's reduce: TPU draw 41, where the twin does the same and runs it once), nor where a
reader is the computation's root (an output of the program, stored by both: draws 40, 80, 83).

Where the gradient matmuls read the cotangent in bf16, this program may compute it in a backward
fusion of its own that ends in the narrow (`convert(y * c)` to bf16, with `y`'s own add where it
is fused in) and hand the bf16 value to its k readers (`narrowed_cotangent_copies`). The program
without remat then sometimes copies the f32 chain, without the narrow, into each of its readers
(TPU draws 88, 140, 204, 216, k = 2: the twin runs the multiply twice and no convert), and with one
reader runs it once, narrow and all (draw 94). Nothing in this program shows which, so both ends
are hinges: the chain's k - 1 copies lower the low end (`twin_copies`), and the narrow the twin
may not run raises the high end (unsure, not counted)."""

from __future__ import annotations

from typing import Mapping

from hloflops.remat.sites import one_call_site
from hloflops.scopes import phase
from hloparse.ir import Computation, Instruction, Module

# The elementwise ops the cotangent of a mean or a sum of squares is made of.
_COTANGENT_OPCODES = frozenset({"multiply", "divide"})


def loss_cotangent_copies(module: Module) -> Mapping[tuple[str, str], int]:
    """(fused computation, op) -> how many more times the program without remat runs the loss's
    cotangent that this program's loss fusion hands out (its readers less one; module docstring)."""
    out: dict[tuple[str, str], int] = {}
    for callee, site in one_call_site(module).items():
        if site is None:
            continue
        comp = module.by_name.get(callee)
        root = comp.root if comp is not None else None
        if root is None or root.opcode != "tuple":
            continue
        elements = [comp.by_name.get(name) for name in root.operands]
        losses = [inst for inst in elements if inst is not None and _is_loss_reduce(inst)]
        if not losses:
            continue
        loss_reads = set().union(*(_above(comp, inst) for inst in losses))
        for index, inst in enumerate(elements):
            if inst is None or not _is_cotangent(inst) or not (_above(comp, inst) & loss_reads):
                continue
            readers = _readers(*site, index)
            if readers is not None and readers > 1:
                out[(callee, inst.name)] = readers - 1
    return out


def narrowed_cotangent_copies(module: Module) -> tuple[Mapping[tuple[str, str], int], frozenset[tuple[str, str]]]:
    """The loss's cotangent a backward fusion of its own narrows for its k > 1 readers (module
    docstring): (fused computation, op) -> k - 1 for the chain the twin may copy into each reader,
    and the narrow it may not run."""
    copies: dict[tuple[str, str], int] = {}
    narrows: set[tuple[str, str]] = set()
    for callee, site in one_call_site(module).items():
        comp = module.by_name.get(callee)
        root = comp.root if comp is not None and site is not None else None
        if root is None or root.opcode != "convert" or not _narrows(comp, root):
            continue
        cotangent = comp.by_name.get(root.operands[0])
        chain = _mean_cotangent_chain(comp, cotangent) if cotangent is not None else None
        if chain is None or _reads_loss_reduce(comp):
            continue
        readers = _plain_readers(*site)
        if readers is None or readers < 2:
            continue
        for name in chain:
            copies[(callee, name)] = readers - 1
        narrows.add((callee, root.name))
    return copies, frozenset(narrows)


def _mean_cotangent_chain(comp: Computation, inst: Instruction) -> list[str] | None:
    """The ops of the loss mean's cotangent `y * c` (a broadcast constant `c`), with `y`'s own add
    of two fusion parameters or widen of one where the fusion holds it: None for any other value (a
    softmax's or a layer norm's cotangent, whose chains read more than the forward's output)."""
    if not _is_cotangent(inst) or inst.opcode != "multiply" or len(inst.operands) != 2:
        return None
    operands = [comp.by_name.get(name) for name in inst.operands]
    if any(op is None for op in operands):
        return None
    scales = [op for op in operands if op.opcode == "broadcast" and _is_constant(comp, op)]
    if len(scales) != 1:
        return None
    y = next(op for op in operands if op is not scales[0])
    if y.opcode == "parameter":
        return [inst.name]
    reads = [comp.by_name.get(name) for name in y.operands]
    if y.opcode in ("add", "convert") and reads and all(op is not None and op.opcode == "parameter" for op in reads):
        return [inst.name, y.name]
    return None


def _is_constant(comp: Computation, broadcast: Instruction) -> bool:
    """A broadcast of a scalar constant (the mean's `2 / n`)."""
    source = comp.by_name.get(broadcast.operands[0]) if broadcast.operands else None
    return source is not None and source.opcode == "constant" and not source.shape.dims


def _narrows(comp: Computation, convert: Instruction) -> bool:
    """A convert to a narrower float than its operand's (f32 to bf16)."""
    source = comp.by_name.get(convert.operands[0]) if convert.operands else None
    return source is not None and convert.shape.element_type == "bf16" and source.shape.element_type == "f32"


def _reads_loss_reduce(comp: Computation) -> bool:
    """The fusion also computes the loss's sum: the loss fusion's hand-out (`loss_cotangent_copies`)."""
    return any(_is_loss_reduce(inst) for inst in comp.instructions)


def _plain_readers(caller: Computation, fusion: Instruction) -> int | None:
    """How many instructions of `caller` read the (non-tuple) `fusion` (None where one is the root)."""
    readers = [inst for inst in caller.instructions if fusion.name in inst.operands]
    if any(inst.is_root for inst in readers):
        return None
    return len(readers)


def _is_loss_reduce(inst: Instruction) -> bool:
    """A reduce to a scalar in the forward: the loss's sum."""
    return inst.opcode == "reduce" and not inst.shape.is_tuple and not inst.shape.dims \
        and phase(inst.op_name) == "forward"


def _is_cotangent(inst: Instruction) -> bool:
    """A cheap elementwise op of the backward, outside every checkpoint (not remat-named)."""
    return inst.opcode in _COTANGENT_OPCODES and bool(inst.shape.dims) and not inst.shape.is_tuple \
        and phase(inst.op_name) == "backward" and "remat" not in inst.op_name


def _above(comp: Computation, inst: Instruction) -> set[str]:
    """The non-parameter, non-constant ops `inst` reads in its fusion, directly or through others."""
    found: set[str] = set()
    pending = list(inst.operands)
    while pending:
        name = pending.pop()
        source = comp.by_name.get(name)
        if name in found or source is None or source.opcode in ("parameter", "constant", "broadcast"):
            continue
        found.add(name)
        pending += source.operands
    return found


def _readers(caller: Computation, fusion: Instruction, index: int) -> int | None:
    """How many instructions of `caller` read output `index` of `fusion` (None where one of them
    is the caller's root: the value leaves the computation, stored by both programs)."""
    elements = {inst.name for inst in caller.instructions
                if inst.opcode == "get-tuple-element" and inst.operands == (fusion.name,)
                and inst.attr("index") == str(index)}
    readers = [inst for inst in caller.instructions if elements.intersection(inst.operands)]
    if any(inst.is_root for inst in readers):
        return None
    return len(readers)
