"""A forward window loop whose product XLA writes as multiply and reduce (a matrix-vector product)
and that runs only because of remat (after optimization; TPU, tensor parallel).

hloflops.remat.regathered_windowed_einsums and hloflops.remat.regathered_forward_windows find a
forward windowed einsum the program without remat does not build: there one all-gather of the
activation serves the forward matmul and the backward (its weight gradient, or here the
recompute's product), and XLA keeps the forward a plain product; with remat the backward gathers
its copy apart, the forward's gather has one reader, and XLA windows it. Both key on the loop's
dots. Where a batch row is one vector (batch 2 on a 2-way data axis) XLA writes each product as a
fusion of `multiply` and `reduce`, in the loop too (TPU 191: whole_model, 293: nnx_loop), and
neither rule saw the loop: its counters, the accumulating `select` and `add`, and the collective
were model FLOPs, and the high end stayed below the truth.

The signs are theirs, for such a loop: the recompute all-gathers its operand under its own remat
name, named as the loop's product (regathered_windowed_einsums' sign; TPU 191), or the backward
gathers the value the loop windows again, in the loop's own frame, under a transpose's name: an
all-gather, or an all-reduce of that value written into zeros (`dynamic-update-slice` of a zero
broadcast: XLA's all-gather folded into the backward's all-reduce; TPU 293).

The loop's products are not remat: the program without remat runs the same product once, its
multiplies the same. Its reduce is (trips - 1) x outputs adds shorter (each trip reduces a part;
the loop's accumulating adds sum the parts): a sure negative remat share of the loop's reduce rows
(`windowed_product_shares`, `RematIndex.partial`: -256 on TPU 191, two loops of 2 trips and 128
outputs; -128 on 124, -192 on 162, -256 on 293, each the reduce's whole miss before). The counted
ops are weak, as the sibling rules' are: the low end stays where it was.

On TPU draws 0-419 it fires on 124 (2 loops), 162 (3), 191 (2) and 293 (2): in each, the loops
the program without remat lacks, and on no program without remat. The forward matvec window
loops it does not mark (TPU 31, 80, 121, 174, 190, 193, 210, 270, 393, 407) are as many in the
program without remat; TPU 404 (haiku layer stack, offload: two in the remat program's entry,
one in the twin's scan body) shows none of the signs and is left."""

from __future__ import annotations

from typing import Callable, Iterator

from hloflops.loops.tripcount import trip_count
from hloflops.remat.collectives import is_zero_broadcast
from hloflops.remat.names import named_components, ends_with, is_remat_named, model_components
from hloflops.remat.op_kinds import MATMUL_OPCODES
from hloflops.remat.regathered_windowed_einsums import (GATHERS, forward_permuting_loops, only_for, recompute_gathers,
                                                         regathered_matmuls)
from hloflops.remat.sites import Key, SiteKey, SiteOp, one_call_site, source_value
from hloparse.ir import CallRole, Computation, Instruction, Module

# What a walk to the gathered value passes by: views and the narrows XLA puts before a gather.
_PASSES = frozenset({"bitcast", "reshape", "copy", "transpose", "convert", "reduce-precision"})
_REDUCES = frozenset({"all-reduce", "all-reduce-start"})


def windowed_matvec_loops(module: Module, ops: list[SiteOp]) -> tuple[set[SiteKey], set[SiteKey]]:
    """(the FLOPs of forward matrix-vector window loops that run only because of remat, but their
    products' multiplies and reduces: remat; the narrows feeding only such a loop: stand-ins), per
    the module docstring."""
    loop_comps: set[str] = set()
    products: set[str] = set()
    feeds: set[tuple[str, str]] = set()
    for comp, inst, inside, fused in _remat_only_loops(module):
        loop_comps |= inside
        products |= fused
        feeds |= only_for(comp, inst)
    if not loop_comps:
        return set(), set()
    counted = {op.key for op in ops if op.key[0] in loop_comps
               and not (op.key[0] in products and op.inst.opcode in ("multiply", "reduce"))}
    narrows = {op.key for op in ops if op.inst.opcode == "convert"
               and ((op.key[0], op.key[1]) in feeds or (op.frame, op.key[0]) in feeds)}
    return counted, narrows


def _remat_only_loops(module: Module) -> Iterator[tuple[Computation, Instruction, set[str], set[str]]]:
    """Each forward matvec window loop that runs only because of remat (module docstring): (its
    computation, the loop, the computations it reaches, its products' fused computations)."""
    callers = one_call_site(module)
    regathered = regathered_matmuls(module)
    recomputes = recompute_gathers(module)
    padded = _regathered_recomputes(module, callers)
    for comp, inst, inside, held in forward_permuting_loops(module):
        fused = matvec_products(module, inst, held)
        if not fused:
            continue
        # haiku names a forward op `jvp(linear_1)/dot_general`, its transpose `checkpoint/linear_1/...`
        recomputed = model_components(inst.op_name) in regathered \
            or {model_components(inst.op_name), named_components(inst.op_name)} & padded or any(
            c == comp.name and ends_with(inst.op_name, t) for c, t in recomputes)
        if recomputed or _gathered_again(module, callers, comp, inst):
            yield comp, inst, inside, fused


def windowed_product_shares(module: Module) -> dict[Key, tuple[int, int]]:
    """(fused computation, reduce) of each product of such a loop -> its remat share, negative
    (`RematIndex.partial`): the program without remat reduces the whole contraction at once, so
    its reduce adds (trips - 1) x outputs more than the loop's reduces of the windows (each trip
    reduces a window; the loop's accumulating adds, counted as remat, sum the parts). Sure: the
    loop runs only because of remat (the signs above), so the twin's product is one plain reduce.
    The share is of the row's FLOPs: trips executions (per run of the loop) of input less output
    elements each."""
    shares: dict[Key, tuple[int, int]] = {}
    for comp, inst, _, fused in _remat_only_loops(module):
        trips = trip_count(module, comp, inst).value
        if not trips or trips < 2:
            continue
        for name in fused:
            for reduce in module.by_name[name].instructions:
                if reduce.opcode != "reduce" or len(reduce.operands) != 2 \
                        or not _reads_multiply(module.by_name[name], reduce.operands[0]):
                    continue
                source = module.by_name[name].by_name[reduce.operands[0]]
                outputs, inputs = reduce.shape.num_elements, source.shape.num_elements
                if inputs > outputs > 0:
                    shares[(name, reduce.name)] = (-(trips - 1) * outputs, trips * (inputs - outputs))
    return shares


def matvec_products(module: Module, loop: Instruction, held: list[Instruction]) -> set[str]:
    """The fused computations of a window loop's products where XLA writes them as multiply and
    reduce: fusions named as the loop (XLA names the loop it builds for a product after it) whose
    reduce adds up a multiply. Empty where the loop runs a dot or a convolution (the other rules'),
    or no such fusion."""
    if any(i.opcode in MATMUL_OPCODES for i in held):
        return set()
    out: set[str] = set()
    for inst in held:
        if inst.opcode != "fusion" or inst.op_name != loop.op_name:
            continue
        for callee in inst.called(CallRole.FUSION):
            body = module.by_name.get(callee)
            if body is not None and any(i.opcode == "reduce" and i.operands
                                        and _reads_multiply(body, i.operands[0]) for i in body.instructions):
                out.add(callee)
    return out


def _reads_multiply(comp: Computation, name: str) -> bool:
    """Is `name` a multiply, through views?"""
    return multiply_through_views(comp, name) is not None


def multiply_through_views(comp: Computation, name: str) -> Instruction | None:
    """The multiply `name` is, through views (a matvec's product before its reduce); else None."""
    for _ in range(8):
        inst = comp.by_name.get(name)
        if inst is None:
            return None
        if inst.opcode == "multiply":
            return inst
        if inst.opcode not in ("bitcast", "reshape", "transpose", "copy") or not inst.operands:
            return None
        name = inst.operands[0]
    return None


def _gathered_source(module: Module, callers: dict[str, tuple[Computation, Instruction] | None],
                     where: Computation, name: str) -> tuple[Computation, Instruction] | None:
    """The value a gather's operand is, through views and the narrows XLA puts before a gather."""
    return source_value(module, callers, where, name, lambda i: i.opcode in _PASSES, 24)


def _gathered_again(module: Module, callers: dict[str, tuple[Computation, Instruction] | None],
                    comp: Computation, loop: Instruction) -> bool:
    """Does a collective named for a transpose, in `loop`'s computation, gather a value the loop
    starts from: an all-gather of it, or an all-reduce of it written into zeros?"""
    start = comp.by_name.get(loop.operands[0]) if loop.operands else None
    if start is None or start.opcode != "tuple":
        return False

    def source(where: Computation, name: str) -> tuple[Computation, Instruction] | None:
        return _gathered_source(module, callers, where, name)

    def key(found: tuple[Computation, Instruction] | None) -> tuple[str, str] | None:
        return None if found is None else (found[0].name, found[1].name)

    windowed = {key(source(comp, name)) for name in start.operands} - {None}
    for inst in comp.instructions:
        if not inst.operands:
            continue
        if inst.opcode in GATHERS and "transpose(" in inst.op_name \
                and key(source(comp, inst.operands[0])) in windowed:
            return True
        if inst.opcode in _REDUCES and any(key(_padded(comp, name, source)) in windowed
                                           and _for_a_transpose(comp, inst, at)
                                           for at, name in enumerate(inst.operands)):
            return True
    return False


def _for_a_transpose(comp: Computation, reduce: Instruction, at: int) -> bool:
    """Is the all-reduce named for a transpose (XLA folds the gather into the backward's own
    all-reduce, TPU 293), or its `at`th result read by one (a weight gradient's product, TPU 124)?"""
    return "transpose(" in reduce.op_name or bool(_transpose_readers(comp, reduce, at))


def _transpose_readers(comp: Computation, reduce: Instruction, at: int) -> list[Instruction]:
    """The readers named for a transpose of the all-reduce's `at`th result."""
    readers = list(comp.users.get(reduce.name, ()))
    if len(reduce.operands) > 1:
        readers = [u for g in readers if g.opcode == "get-tuple-element" and g.attributes.get("index") == str(at)
                   for u in comp.users.get(g.name, ())]
    return [u for u in readers if "transpose(" in u.op_name]


def _regathered_recomputes(module: Module, callers: dict[str, tuple[Computation, Instruction] | None]
                           ) -> set[tuple[str, ...]]:
    """Model names of the matmuls whose transpose reads a recompute gathered by an all-reduce (written
    into zeros): regathered_windowed_einsums' `regathered_matmuls` for the gather XLA writes as an
    all-reduce (TPU 162: haiku saves the products, the backward recomputes the relu after them)."""
    def source(where: Computation, name: str) -> tuple[Computation, Instruction] | None:
        return _gathered_source(module, callers, where, name)

    out: set[tuple[str, ...]] = set()
    for comp, inst in module.instructions():
        if inst.opcode not in _REDUCES:
            continue
        for at, name in enumerate(inst.operands):
            found = _padded(comp, name, source)
            if found is not None and is_remat_named(found[1]):
                out |= {model_components(u.op_name) for u in _transpose_readers(comp, inst, at)}
    return out


def _padded(comp: Computation, name: str,
            source: Callable[[Computation, str], tuple[Computation, Instruction] | None]
            ) -> tuple[Computation, Instruction] | None:
    """The value an all-reduce's operand writes into zeros (`dynamic-update-slice` of a zero
    broadcast: each device's shard in its place, summed into the gathered value), traced to its
    source; None for any other operand."""
    found = source(comp, name)
    if found is None or found[1].opcode != "dynamic-update-slice" or len(found[1].operands) < 2:
        return None
    where, dus = found
    base = source(where, dus.operands[0])  # the zeros may be a parameter of the fusion, broadcast outside
    return source(where, dus.operands[1]) if base is not None and is_zero_broadcast(base[0], base[1].name) else None
