"""Relu masks this program recomputes inside their readers' fusion, which the program without remat
may hand from its forward to its backward packed into bits (after optimization, TPU only;
hloflops.remat.pairing calls `twin_packed_mask_copies`).

Relu's jvp keeps the mask `x > 0` as a residual: the program without remat computes it in its
forward and must hand it to its backward through memory. TPU may store such a `pred` value a bit
per element (hloflops.remat.packed_masks): the forward's fusion widens the mask, shifts each element
by its index along one dimension and ORs that dimension away (4 ops per element), and each backward
fusion reading it unpacks it (the packed word widened, `and` with `1 << iota`, narrowed to `pred`:
4 per element) and computes relu's `select` with it itself (wtpu 301: three masks, each packed once
and unpacked in three fusions, the bias gradient's reduce and two convolutions' operand narrows,
each with its own select: shift-left 393,216, and 294,912, select 196,608 and the converts and
reduces, 1.59M FLOPs the program without remat runs and this one does not; wtpu 337, vtpu 296
alike). Or it may store the preactivation instead and recompute the mask in its backward, packing
nothing (vtpu 259, ntpu 121, htpu 97: the same program with remat shows the same recompute). Nothing
in this program tells which: it recomputes the mask in its backward from the recomputed
preactivation, inside the one fusion that computes relu's select, and hands only the select's value
on. So each such mask is a `twin_copies` hinge on its compare (one copy per element of the mask):
the range's low end drops by the packing, an unpack and a select for each computing reader of the
select's value, less this program's one select; never a sure share.

The sign: a remat-named `compare` (jax's `gt`) of rank two or more in the backward, outside any
loop body that runs no forward op (a scan's backward loop: there the program without remat stacks
the mask across trips unpacked, hloflops.remat.packed_masks), reading a parameter of its fusion
(the preactivation the recompute's fusion handed over) and a broadcast of a constant (relu's 0),
whose only readers are selects in its fusion (the mask itself never leaves it), the select's value
read by a spatial convolution (the layer's gradients: a convolution layer's mask; neither program
of any TPU draw 0-359 packs a matmul layer's mask, and without this the sign fired on eleven matmul
programs of TPU 0-179, exact tpu 22 and 35 among them). A mask this program packs (a convert reads
it) or hands out unpacked (its fusion's output) is left alone: there the program without remat
packs or stores it alike (TPU draws 0-359: where this program packs a
recomputed mask outside a scan, its twin packs the forward's; where it hands one out unpacked, its
twin stores the forward's unpacked). Of TPU draws 0-359 the sign fires on htpu 97, ntpu 121, vtpu
250 (a scan XLA left no loop of), 259 and 296, wtpu 301 and 337; of these only 296, 301 and 337's
twins pack (301 and 337 were out of range, now in). None of them is exact
(tpu 47's masks read a bias add in their own fusion, not a parameter: its twin stores the
convolution's output and packs nothing, and the rule leaves it alone).

The converse, `shared_mask_packings` (hloflops.remat.by_platform calls it): where this program packs a
recomputed mask itself outside a scan's backward loop, the program without remat packs its
forward's mask alike, so that packing and its unpacks are model FLOPs."""

from __future__ import annotations

from hloflops.cost.tpu import is_tpu_module
from hloflops.remat.fusion_copies import backward_loop_bodies
from hloflops.remat.names import REMAT_SCOPE
from hloflops.remat.packed_conv_inputs import is_spatial_convolution
from hloflops.remat.packed_masks import packed_mask_keys
from hloflops.remat.readers import VIEWS, output_readers
from hloflops.remat.sites import SiteKey, SiteOp, fusion_callers
from hloflops.scopes import phase
from hloparse.ir import CallRole, Computation, Instruction, Module

# jax's name of the compare relu's jvp keeps as its mask.
_MASK = "gt"
# Per element of the mask: the twin's packing (widen, shift, narrow, the OR-reduce).
_PACKING = 4
# Per element and reading fusion: the unpack (widen, shift, `and`, narrow to pred) and the select.
_UNPACK_AND_SELECT = 5
# Ops that hand the select's value on inside its fusion (a narrow for a convolution's operand).
_HANDS_ON = frozenset({"bitcast", "reshape", "copy", "transpose", "convert"})


def twin_packed_mask_copies(module: Module, ops: list[SiteOp]) -> dict[SiteKey, int]:
    """Each recomputed relu mask computed only inside its select's fusion (module docstring) -> the
    ops per element the program without remat may run to pack it and unpack it in each reader."""
    if not is_tpu_module(module):
        return {}
    loops = backward_loop_bodies(module, ops)
    callers = None
    found: dict[SiteKey, int] = {}
    for op in ops:
        inst = op.inst
        if inst.opcode != "compare" or inst.shape.element_type != "pred" or inst.shape.rank < 2 \
                or not op.named or REMAT_SCOPE not in op.op_name or phase(op.op_name) != "backward" \
                or op.op_name.rsplit("/", 1)[-1] != _MASK or op.frame in loops:
            continue
        comp = module.by_name.get(op.key[0])
        if comp is None or not _reads_preactivation(comp, inst):
            continue
        selects = comp.users.get(inst.name, ())
        if not selects or any(r.opcode != "select" for r in selects) or inst is comp.root:
            continue
        callers = callers if callers is not None else fusion_callers(module)
        counts = [_readers(module, comp, select, callers) for select in selects]
        readers = sum(n for n, _ in counts)
        if readers and any(conv for _, conv in counts):
            found[op.key] = _PACKING + _UNPACK_AND_SELECT * readers - 1
    return found


def _reads_preactivation(comp: Computation, inst: Instruction) -> bool:
    """Does the compare read a parameter of its fusion (the preactivation handed in) against a
    broadcast constant (relu's 0)?"""
    if len(inst.operands) != 2:
        return False
    value, zero = (comp.by_name.get(name) for name in inst.operands)
    if value is None or zero is None or value.opcode != "parameter" or zero.opcode != "broadcast":
        return False
    source = comp.by_name.get(zero.operands[0]) if zero.operands else None
    return source is not None and source.opcode == "constant"


def _readers(module: Module, comp: Computation, select: Instruction, callers: dict) -> tuple[int, bool]:
    """How many ops compute with the select's value: in its fusion (a reduce: the bias gradient), and
    outside it the readers of each fusion output it reaches through narrows and views (a fusion or
    convolution each: where the program without remat would unpack the mask and select again); and
    whether a spatial convolution (its layer's gradients) is among them."""
    count, conv, outputs = 0, False, set()
    pending, seen = [select], set()
    while pending:
        inst = pending.pop()
        if inst.name in seen:
            continue
        seen.add(inst.name)
        if inst is comp.root:
            outputs.add(None)
        for reader in comp.users.get(inst.name, ()):
            if reader.opcode in _HANDS_ON:
                pending.append(reader)
            elif reader.opcode == "tuple" and reader is comp.root:
                outputs |= {i for i, name in enumerate(reader.operands) if name == inst.name}
            else:
                count += 1
                conv = conv or is_spatial_convolution(reader)
    for frame, fusion in callers.get(comp.name, ()):
        for index in outputs:
            found = output_readers(frame, fusion, None if index is None else [index], through=VIEWS | {"convert"})
            count += len(found)
            conv = conv or any(_holds_convolution(module, reader) for reader in found)
    return count, conv


def _holds_convolution(module: Module, inst: Instruction, depth: int = 2) -> bool:
    """Is the instruction a spatial convolution, or a fusion holding one (nested fusions too)?"""
    if is_spatial_convolution(inst):
        return True
    if inst.opcode != "fusion" or not depth:
        return False
    return any(_holds_convolution(module, called, depth - 1)
               for name in inst.called(CallRole.FUSION) if name in module.by_name
               for called in module.by_name[name].instructions)


def shared_mask_packings(module: Module, ops: list[SiteOp], decided) -> None:
    """Settle as model FLOPs each recomputed mask's bit-packing outside a scan's backward loop, and
    its unpacks (`decided`: hloflops.remat.by_platform's `Decided`).

    Where this program packs a recomputed relu mask to hand it between backward fusions, outside a
    loop body that runs no forward op, the program without remat packs its forward's mask of the
    same shape and layout alike and unpacks it in as many readers (every TPU draw 0-359 where this
    program so packs: equal shift-left, and, OR-reduce counts in both programs, tpu 16, 18, 32, 59,
    htpu 60, 64, 67, 89, 96, ntpu 154, 165, 166, 172, utpu 192, 223, vtpu 245, 262, 281, wtpu 304,
    317, 320, 326, 338, 355; 304's unpack widens were a sure share, its low end above the truth by
    two of them). So the packing's and
    the unpacks' ops (hloflops.remat.packed_masks finds them) run in both: model FLOPs, settled;
    the compare is the recompute's and left to the other rules. Inside a scan's backward loop the
    program without remat stacks the mask unpacked instead (hloflops.remat.packed_masks: remat)."""
    if not is_tpu_module(module):
        return
    loops = backward_loop_bodies(module, ops)
    found = packed_mask_keys(module, ops, lambda mask_ops: all(
        op.named and phase(op.op_name) == "backward" and op.frame not in loops for op in mask_ops), with_mask=False)
    decided.remat -= found
    decided.certain |= found
    decided.paired_by_value -= found
    decided.stand_ins -= found
