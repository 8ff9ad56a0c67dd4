"""A cheap scale this program computes once and stores, which the program without remat may copy
into each of its readers (hloflops.remat.pairing calls `stored_scale_copies` after
hloflops.remat.twin_saves).

The loss's gradient `g * c` (a mean's `2 / n`, jax's `broadcast_in_dim` times the cotangent)
is a multiply of a value by a broadcast constant. XLA's instruction fusion copies such a cheap
producer into each consumer fusion; where it instead makes it an output of a multi-output fusion
(the loss fusion that also sums the square), the value is computed once and stored, and its k
readers (the last weight's gradient matmul, the input gradient's fusion, the bias gradient's
reduce) read it from memory. Which of the two XLA picks rests on how it fused the whole program,
outside any checkpoint: the program without remat may output the unscaled value from that fusion
and scale it in each reader, k copies against this program's one (TPU seeds 4, 8 and 22: the
twin runs the scale three or four times, this program once, so the per-opcode truth of multiply
is negative and no split of this program's ops reaches it). The copies the program without remat
may make beyond this program's, k - 1, are reported as `twin_copies` (hloflops.results.RematHinge):
they lower the range's low end only, never the count, as the stored value's readers are a counted
fact of this program and the copies XLA makes of a cheap producer are at most one per reader. Of
the thirteen TPU draws where it applies, the twin's copies are exactly k on eleven (4, 8, 17, 22
out of the range before; 25, 27, 39, 48, 50, 52, 55), and k + 1 on two (23, 43: the twin keeps
the stored copy too, beside one in each of its two readers): the low end is not too low.
On TPU, a reader that is a cheap loop fusion handing the value on to several readers of its own counts as
those readers (hloflops.remat.cascaded_readers): the twin may copy it into each, the scale with it
(held-out TPU 354: four copies of the scale against three direct readers, and two of the reader's
add), and its ops lower the low end by the copies beyond this program's one too.
Of the no-matmul case the draws say the twin does either, and the readers tell which (TPU): XLA fuses
a cheap producer into a single-output loop fusion or an elementwise op it reads, where a convert
narrowing the value for the matmuls, a multi-output or output fusion or a reduce reads it stored. So a
loop fusion's scale is counted as above only where some reader is a single-output loop fusion or a
bare elementwise op (not a convert; `_takes_a_copy`), and only the loss's scale, outside every
checkpoint (a layer's gradient scale by a constant inside a checkpoint's transpose is not the class
scanned). Scan of TPU 0-359 (the scale's multiplies in
both programs): the sign fires on 19, 62, 137, 159, 185, 191, 209, 237, 246, 268, 277, 293, 294,
297, 298, 341, 345, 348, 352, 353, all copies in the twin; on 193 (one reader: no copy to make), 231,
252 and 326 (in range or exact, unchanged) where the twin stores it; it misses 9, 45, 147, 273 (the twin
copies the scale, readers as on 76, 123, 156, 286 where it stores it: no sign, left out)."""

from __future__ import annotations

from hloflops.cost.tpu import is_tpu_module
from hloflops.remat.cascaded_readers import cascaded_readers
from hloflops.remat.fusion_copies import fused_outputs
from hloflops.remat.gradient_operand_copies import outside_checkpoints
from hloflops.remat.op_kinds import DUPLICATED, MATMUL_OPCODES
from hloflops.remat.readers import output_readers
from hloflops.remat.sites import SiteKey, SiteOp, one_call_site
from hloflops.scopes import phase
from hloparse.ir import CallRole, Computation, Instruction, Module

# What a reader may be for the scale to be copied into it: a fusion, or an op XLA fuses its
# producer into (a reduce, a matmul). Views hand the value on (hloflops.remat.readers.VIEWS);
# tuples and a stack's update store it and compute nothing.
_PASSED_OVER = frozenset({"tuple", "get-tuple-element", "dynamic-update-slice"})


def stored_scale_copies(module: Module, ops: list[SiteOp], remat: set[SiteKey],
                        twin_copies: dict[SiteKey, int]) -> None:
    """Each backward scale by a constant (module docstring) that a multi-output fusion outputs and
    k > 1 computing instructions of its caller read: `twin_copies[key] += k - 1`. Not a remat-named
    op nor one counted remat (the count is this program's own; only the low end moves)."""
    callers = one_call_site(module)
    tpu = is_tpu_module(module)  # the cascade is TPU's fusion (seen there only)
    for op in ops:
        inst = op.inst
        if op.marked or op.key in remat or inst.opcode != "multiply" or phase(op.op_name) != "backward":
            continue
        comp = module.by_name.get(op.key[0])
        caller = callers.get(op.key[0])
        if comp is None or caller is None or comp.root.opcode != "tuple" \
                or inst.name not in fused_outputs(module).get(comp.name, ()) or not _scales(comp, inst):
            continue
        if inst.name not in comp.root.operands:
            continue
        readers = output_readers(caller[0], caller[1], [comp.root.operands.index(inst.name)],
                                 passed_over=_PASSED_OVER)
        # a loop fusion storing the scale: only the loss's own (outside every checkpoint: a layer's
        # gradient scale is not the class scanned) with a reader that shows the twin's copy
        if not any(i.opcode in MATMUL_OPCODES for i in comp.instructions) \
                and not (tpu and outside_checkpoints(op.op_name)
                         and any(_takes_a_copy(module, reader) for reader in readers)):
            continue
        # a cheap reader stands for its own readers: the twin may copy it, and the scale with it,
        # into each of them (hloflops.remat.cascaded_readers)
        count, cheap = cascaded_readers(module, caller[0], readers, _PASSED_OVER) if tpu else (len(readers), {})
        if count > 1:
            twin_copies[op.key] = twin_copies.get(op.key, 0) + count - 1
        for op_ in ops:
            # not a narrow: a reader computing the cheap ops reads them wide
            if op_.key[0] in cheap and op_.inst.opcode in DUPLICATED - {"convert"} and not op_.marked \
                    and op_.key not in remat:
                twin_copies[op_.key] = twin_copies.get(op_.key, 0) + cheap[op_.key[0]] - 1


def _takes_a_copy(module: Module, reader: Instruction) -> bool:
    """A reader the program without remat fuses a cheap producer into rather than reading it from
    memory: a single-output loop fusion, or a bare elementwise op that XLA left unfused (a convert
    aside: it narrows the stored value for a matmul, as where the twin stores it too)."""
    if reader.opcode == "fusion":
        if reader.attributes.get("kind") != "kLoop":
            return False
        callees = reader.called(CallRole.FUSION)
        comp = module.by_name.get(callees[0]) if len(callees) == 1 else None
        return comp is not None and comp.root.opcode != "tuple"
    return reader.opcode in DUPLICATED and reader.opcode != "convert"


def _scales(comp: Computation, inst: Instruction) -> bool:
    """A multiply of a value computed in this fusion by a broadcast scalar constant."""
    kinds = []
    for name in inst.operands:
        operand = comp.by_name.get(name)
        if operand is None:
            return False
        if operand.opcode == "broadcast" and operand.operands and \
                getattr(comp.by_name.get(operand.operands[0]), "opcode", None) == "constant":
            kinds.append("scale")
        elif operand.opcode not in ("parameter", "constant", "broadcast"):
            kinds.append("value")
    return sorted(kinds) == ["scale", "value"]
