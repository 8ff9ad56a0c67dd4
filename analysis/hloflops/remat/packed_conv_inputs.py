"""A convolution's input packed by a concatenation TPU writes as `-inf` pads and maximums (after
optimization, TPU only).

To lay out a 3x3 convolution's input (for the convolution itself, or for its weight gradient's
window), TPU concatenates shifted slices of the activation along a minor dimension, and writes the
concatenation as a loop fusion: each piece padded with `-inf` to the full width, widened to f32,
combined with `maximum`, narrowed back. Its FLOPs (the maximums and the round-trip converts) are
not the activation's arithmetic but the packing of the one convolution operand that reads it: the
program without remat packs the same operand for the same convolution, wherever it computes the
activation (its forward, to save it), while the program with remat packs it where the recompute
runs, under the recompute's op_name. So the packing counts with the convolution reading it, remat
exactly when that convolution is, not with the values it packs (tpu seed 16: the three packings
of a nested checkpoint's recompute were counted remat by their name, their converts over-counted).
The same holds for a packing nested in the fusion of the convolution reading it, and for a
packing whose only reader is a second packing (the weight gradient's window of pieces): that
follows the convolution the second one feeds. A 1-tap "convolution" is a matmul (an LSTM's gates
concatenated the same way), not a packing's reader.

A piece that needs the convolution's zero halo is padded with 0 and masked to `-inf` outside its
place by a `select` on an `iota` comparison. Whether that mask exists follows how XLA fused the
halo pad, not the arithmetic: where one piece feeds two packings XLA pads it once, unfused (no
FLOPs), and each packing reads it padded. The program without remat keeps an activation for its
backward and packs it for the forward convolution and for the weight gradient's window from that
one value, so it may pad once where this program, packing the forward's copy and the recompute's,
masks in both. Hence a mask of a packing nested in a forward convolution's fusion, or read by a
second packing, is model FLOPs but unsure (`stand_ins`: the range covers it); tpu seed 16's masks
are only partly remat, and this program alone does not say which (the twin's sharing).

A fusion counts as such a packing only where its body does nothing else: pads (whose padding value
is `-inf`, or any value under such a mask), converts, maximums of those pads (or of maximums of
them), the masks, views; and every reader of its output is a fusion holding a convolution, or a
windowed convolution in the fusion holding the packing, or such a packing of the packing, all of
one remat flag. Not in a while loop's body: there the convolutions' own flags rest on the
per-trip pairing, which this rule would only carry over to the packings (held-out tpu seed 73, a
scan whose convolutions are under-counted by a third: its packings would follow them).

A weight gradient's form (packed, with a packing of its own, or natural), which the program
without remat may choose otherwise, is a range hinge of hloflops.remat.weight_gradient_forms: the
packings it finds here are the ones this module flags with their convolution.
"""

from __future__ import annotations

from hloflops.cost.tpu import is_tpu_module
from hloflops.remat.sites import SiteKey, SiteOp, one_call_site, value_readers
from hloparse.ir import CallRole, Computation, Instruction, Module

_PASS = frozenset({"convert", "bitcast", "reshape", "copy"})
_ALLOWED = _PASS | {"parameter", "constant", "pad", "maximum", "broadcast", "iota", "compare", "select"}
# A windowed gather's packing (hloflops.remat.repacked_loop_gathers) slices this device's window out
# of a pad (a `dynamic-slice` at a partition-dependent offset) and may hand out several values.
_WINDOW = frozenset({"dynamic-slice"})


def packed_conv_inputs(module: Module, ops: list[SiteOp], decided) -> None:
    """Flag each `-inf` packing fusion's ops as the convolutions reading it are, settled
    (`decided` is hloflops.remat.by_platform's `Decided`)."""
    remat = decided.remat
    counted: set[SiteKey] = set()
    model: set[SiteKey] = set()
    halos: set[SiteKey] = set()
    if not is_tpu_module(module):
        return
    by_comp: dict[str, list[SiteOp]] = {}
    for op in ops:
        by_comp.setdefault(op.key[0], []).append(op)
    callers = one_call_site(module)
    readers = value_readers(module)
    bodies = {name for _, inst in module.instructions() if inst.opcode == "while"
              for name in inst.called(CallRole.WHILE_BODY)}
    for comp, inst in module.instructions():
        if inst.opcode != "fusion" or inst.attributes.get("kind") != "kLoop":
            continue
        body_names = inst.called(CallRole.FUSION)
        if len(body_names) != 1 or callers.get(body_names[0]) is None:
            continue
        body = module.by_name[body_names[0]]
        if not is_packing(body):
            continue
        if any(op.frame in bodies for op in by_comp.get(body.name, ())):
            continue  # in a loop body a convolution's flag rests on per-trip pairing (see above)
        flags = _reader_conv_flags(module, comp, readers.get((comp.name, inst.name), []), by_comp, callers, remat,
                                   readers)
        if len(flags) != 1:
            continue
        flag = flags.pop()
        (counted if flag else model).update(op.key for op in by_comp.get(body.name, ()))
        if not flag and _read_by_forward_conv(comp, readers.get((comp.name, inst.name), []), by_comp):
            halos |= {op.key for op in by_comp.get(body.name, ()) if op.inst.name in _halo_masks(body)}
    decided.remat = (remat | counted) - model
    decided.certain |= counted | model
    decided.stand_ins |= halos


def _read_by_forward_conv(comp: Computation, readers: list[Instruction], by_comp: dict[str, list[SiteOp]]) -> bool:
    """Is the packing nested in the fusion of the forward convolution reading it (its only reader)?"""
    if len(readers) == 1 and readers[0].opcode == "fusion" and readers[0].attributes.get("kind") == "kLoop":
        return True
    return len(readers) == 1 and readers[0].opcode == "convolution" and \
        all("transpose(" not in op.op_name for op in by_comp.get(comp.name, ()) if op.inst is readers[0])


def _halo_masks(body: Computation) -> set[str]:
    """The selects masking a zero-padded piece to `-inf` outside its place, and their comparisons."""
    names: set[str] = set()
    for inst in body.instructions:
        if inst.opcode == "select" and len(inst.operands) == 3 and _is_iota_mask(body, inst.operands[0]) \
                and is_minus_inf(body, inst.operands[2]):
            names |= {inst.name, inst.operands[0]}
    return names


def is_packing(body: Computation, windows: bool = False) -> bool:
    """Only `-inf` pads, converts, views and maximums of those pads, with one maximum at least; with
    `windows`, also the windows a windowed gather slices out of such pads and a tuple of outputs."""
    passing = _PASS | _WINDOW if windows else _PASS
    allowed = _ALLOWED | _WINDOW | {"tuple"} if windows else _ALLOWED
    if any(inst.opcode not in allowed for inst in body.instructions):
        return False
    maximums = [inst for inst in body.instructions if inst.opcode == "maximum"]
    return bool(maximums) and all(_from_inf_pad(body, name, passing) for inst in maximums for name in inst.operands)


def _from_inf_pad(body: Computation, name: str, passing: frozenset[str]) -> bool:
    """Is the value a `-inf` pad, or a maximum of such, through the ops `passing` hands it on by?"""
    inst = body.by_name.get(name)
    while inst is not None and inst.opcode in passing and inst.operands:
        inst = body.by_name.get(inst.operands[0])
    if inst is None:
        return False
    if inst.opcode == "maximum":
        return all(_from_inf_pad(body, operand, passing) for operand in inst.operands)
    if inst.opcode == "select" and len(inst.operands) == 3:
        return _is_iota_mask(body, inst.operands[0]) and is_minus_inf(body, inst.operands[2]) and \
            _is_piece(body, inst.operands[1])
    return inst.opcode == "pad" and len(inst.operands) == 2 and is_minus_inf(body, inst.operands[1])


def _is_iota_mask(body: Computation, name: str) -> bool:
    """A comparison of an iota with a constant: which positions of the packed dimension a piece
    covers."""
    inst = body.by_name.get(name)
    if inst is None or inst.opcode != "compare" or len(inst.operands) != 2:
        return False
    kinds = set()
    for operand in inst.operands:
        op = body.by_name.get(operand)
        while op is not None and op.opcode in _PASS | {"broadcast"} and op.operands:
            op = body.by_name.get(op.operands[0])
        kinds.add(op.opcode if op is not None else None)
    return kinds == {"iota", "constant"}


def _is_piece(body: Computation, name: str) -> bool:
    """A slice padded into place (with any padding value) or a parameter, through views."""
    inst = body.by_name.get(name)
    while inst is not None and inst.opcode in _PASS and inst.operands:
        inst = body.by_name.get(inst.operands[0])
    return inst is not None and inst.opcode in ("pad", "parameter")


def is_minus_inf(body: Computation, name: str) -> bool:
    """Is the value a `-inf` constant, through converts, views and broadcasts (a packing's pad value)?"""
    inst = body.by_name.get(name)
    while inst is not None and inst.opcode in _PASS | {"broadcast"} and inst.operands:
        inst = body.by_name.get(inst.operands[0])
    return inst is not None and inst.opcode == "constant" and \
        inst.attributes.get("literal", "").strip("{} ") == "-inf"


def _reader_conv_flags(module: Module, comp: Computation, readers: list[Instruction],
                       by_comp: dict[str, list[SiteOp]], callers: dict, remat: set[SiteKey],
                       all_readers: dict, depth: int = 2) -> set[bool]:
    """The remat flags of the convolutions the readers hold (empty unless every reader is a
    fusion, called once, holding one convolution at least, or a packing of the packing, read so)."""
    flags: set[bool] = set()
    for reader in readers:
        names = reader.called(CallRole.FUSION) if reader.opcode == "fusion" else []
        if depth and len(names) == 1 and callers.get(names[0]) is not None and \
                reader.attributes.get("kind") == "kLoop" and is_packing(module.by_name[names[0]]):
            outer = _reader_conv_flags(module, comp, all_readers.get((comp.name, reader.name), []), by_comp,
                                       callers, remat, all_readers, depth - 1)
            if not outer:
                return set()
            flags |= outer
            continue
        if reader.opcode == "convolution":
            if not is_spatial_convolution(reader):  # a matmul TPU writes as a convolution
                return set()
            flags |= {op.key in remat for op in by_comp.get(comp.name, ()) if op.inst is reader}
            continue
        if reader.opcode != "fusion":
            return set()
        names = reader.called(CallRole.FUSION)
        if len(names) != 1 or callers.get(names[0]) is None:
            return set()
        convs = [op for op in by_comp.get(names[0], ()) if op.inst.opcode == "convolution"]
        if not convs:
            return set()
        flags |= {op.key in remat for op in convs}
    return flags


def is_spatial_convolution(inst: Instruction) -> bool:
    """A convolution of the source program (`conv_general_dilated`) with a window wider than one
    tap; TPU writes matmuls as convolutions too, attention's with windows."""
    return inst.opcode == "convolution" and any(w.size > 1 for w in inst.window or ()) and \
        "conv_general_dilated" in inst.op_name
