"""How many of float normalization's widens run because of remat (after optimization, CPU).

XLA's float normalization computes a bf16 op in f32: it widens each bf16 value to f32 once per
fusion that reads it (`convert(p)` of a fusion parameter) and once inside the fusion computing it
where that fusion reads it again (`convert(convert(y, bf16), f32)`, the round trip). So the count
of widens of a value follows the fusions, not the values (hloflops.remat.normalization).

A checkpointed block's forward hands out only what the policy saves and its output: XLA fuses its
elementwise chains into few fusions, each widening a value once. Its recompute hands the backward
every intermediate the backward reads, and so does the program without remat's forward: XLA
splits both the same way, one fusion per value the backward reads, each widening what it reads
(more seed 9: gelu's `h = x @ w + b` in one forward fusion, widened once; in the recompute and in
the program without remat's forward, read by three fusions, widened three times). The widens that
run because of remat are then as many as the forward's, value by value: of a value's widens in
the fusions computing the recompute, the first as many as the forward fusions' widens of the
forward's value are remat, the rest are the program without remat's too. A forward value the
recompute reads (a bias, widened by the forward's fusion and by the recompute's) counts the same
way. The recompute's value is matched to the forward's by opcode, shape and name inside the
checkpoint (`inner_tail`, of two components at least), in the same frame (value numbers differ
where the recompute reads other inputs than the forward); a value of the forward by its number.
A bare primitive's name (a model without module scopes) tells no value from another: such a
recompute is matched by its value number, which is the forward's where it reads the same inputs
in the same frame (a Python loop's layers, base seed 129: `h = x @ w1` widened by three recompute
fusions and one forward one); where the numbers differ nothing is matched. A program input (the
first layer's input, read by the forward's and the recompute's residual adds, base seed 5) is
counted the same way, by the parameter it reads (a weight cast again in a fusion only recomputes
read, `normalization.widens_only`: base seed 103, each attention weight widened for the forward's
matmul and again for the recompute's, once in the program without remat).

A widen alone in its fusion (`normalization.widens_only`: XLA's wrap for a library fusion reading
the value, layer norm's `sum((x - mean) ** 2)`) of a value a recompute computes, read by recomputed
ops alone, is a recompute fusion too, though its widen carries the recompute's mark: the forward
wraps its own for its own reader. And where the recompute reads its input through the checkpoint's
barrier, its value is numbered apart from the forward's, and a bare primitive's name matches none:
`pairing` took one of its widens for the forward's copy CSE merged (the first of its class, the
lone widen: base seed 5). Such a value's forward is then counted from the forward's values of its
primitive, shape and frame: where the forward's fusions widen each of them as often (a Python
loop's layers, each layer norm's `x - mean` widened for the variance's reduce and for the scaling),
its own forward value was widened so often too (base seeds 5 and 129: `x - mean`, `var + eps`
and softmax's row sums of the second and third layers). Where they differ nothing is inferred.

A fusion of recomputed ops alone whose value `pairing` left to the forward's copy (none of its
outputs remat: a residual sum `x + (h @ w + b)`, whose forward copy under a whole-model
checkpoint counts, hloflops.remat.whole_checkpoint_widens) is on no side, yet it widens what it
reads for the recompute ops it holds: a forward value it reads (the bias's cast, widened once by
the forward's fusion and once here, once by the program without remat's) is counted value by
value as a recompute fusion's widen (base seed 83: the out projection's and the second matmul's
biases, whose widens had gone uncounted on both sides).

A recompute fusion that hands its value out only in another layout for backward ops alone (XLA's
transpose for a weight gradient's matmul, `saved_copies.hands_out_relayout`) stands for the
relayout fusion the program without remat builds of its forward's value, widening it as well: its
widens of what it reads are model FLOPs (seed 30 of `more`, a conv net's `relu(h)` relaid out for
the kernel gradient; seed 113, attention's query relaid out for the backward's `bqhd,bkhd->bhqk`).
Not its widen of a smaller operand it broadcasts in (a bias): the relayout of the program without
remat reads the finished value, so that widen is the recompute's, counted value by value against
the forward fusion's (held-out more seed 214: the key's `k + b`, relaid out by the forward and by
the recompute, the program without remat adding the bias once).

A library fusion's f32 output (a matmul's) is rounded to bf16 in each loop fusion reading it, a
narrow then a widen: where the recompute's bias add reads the forward's matmul (CSE merged the
two), the forward's fusion and the recompute's each round it, the program without remat's one
fusion once (held-out base seed 217). The narrowing, read by that widen alone, runs once per
fusion as the widen does and takes the widen's count. Where the forward's fusion rounds such a
value itself while a lone narrowing fusion stores it rounded for the recompute and the backward,
the program without remat stores it once and its forward reads the stored value: as many stored
roundings as the forward's round trips of the value are remat (base seed 54, softmax's `exp`).

A checkpoint around the whole model turns this around (hloflops.remat.whole_checkpoint_widens);
its widens' round trips are left as that rule settled them.

How XLA fused the program without remat is not in sight: these counts rest on fusion (the range
covers them: an uncounted widen in a recompute fusion is `unsure`, a counted one `loose`); the
whole-model rule's are settled both ways."""

from __future__ import annotations

import math
from collections import Counter

from hloflops.remat.fusion_copies import fused_outputs
from hloflops.remat.names import ends_with, inner_tail
from hloflops.remat.normalization import NARROW_FLOATS, widens_only
from hloflops.remat.op_kinds import shape_key
from hloflops.remat.sites import SiteKey, SiteOp
from hloflops.remat.whole_checkpoint_widens import whole_checkpoint_widens
from hloflops.remat.widen_index import WidenIndex
from hloflops.scopes import phase
from hloparse.ir import Computation, Instruction, Module


def balanced_widens(module: Module, ops: list[SiteOp],
                    remat: set[SiteKey]) -> tuple[set[SiteKey], set[SiteKey], set[SiteKey]]:
    """The recompute with each value's widens in recompute fusions counted as the forward's
    widens of it (see the module's docstring), the widens this rule decided, and those the
    whole-model rule settled."""
    fused = fused_outputs(module)
    if not fused:
        return remat, set(), set()
    index = WidenIndex(module, ops, remat, fused)
    groups: dict[tuple, list[tuple[str, SiteOp]]] = {}
    forward_named: list[tuple[SiteOp, SiteOp]] = []  # (source, widen) of forward widens of named forward ops
    relaid: set[SiteKey] = set()
    primitive_of: dict[tuple, tuple] = {}  # a recompute's value group: its primitive, shape and frame
    for op, comp in index.widens():
        side = index.side(op.key[0], op.key[2])
        if side is None and _lone_recompute_widen(index, comp, op, remat):
            side = "recompute"
        if side is None and _beside_a_forward_copy(index, comp, op):
            side = "recompute"
        if side is None:
            continue
        if side == "relayout":
            if not _reads_parameter(comp, op.inst):
                continue
            if not _broadcast_operand(comp, op.inst):
                relaid.add(op.key)
                continue
            side = "recompute"  # a bias the relayout's recompute adds: counted value by value
        source = index.source(comp, op.inst.operands[0], op.key[2])
        if source is None:
            # A program input (the first layer's input, read by the recompute's residual add):
            # counted value by value as well.
            read = index.program_input(comp, op.inst.operands[0])
            if read is not None:
                groups.setdefault(("input", read, op.frame), []).append((side, op))
            continue
        if source.marked:
            # A name of one component (the primitive's, a model without module scopes) tells no
            # value from another of its opcode and shape: no twin is matched by it.
            tail = inner_tail(source.op_name) if source.op_name else ()
            if side == "recompute" and len(tail) >= 2:
                key = ("recompute", source.inst.opcode, shape_key(source.inst.shape), tail, op.frame)
                groups.setdefault(key, []).append((side, op))
            elif side == "recompute":
                # Its value number, which it shares with the forward's value where it reads the
                # same inputs (one frame: a Python loop's layers, base seed 129).
                groups.setdefault(("value", source.exact, op.frame), []).append((side, op))
                primitive_of[("value", source.exact, op.frame)] = _primitive(source, op.frame)
            continue
        if side == "forward" and source.op_name and phase(source.op_name) == "forward":
            forward_named.append((source, op))
        groups.setdefault(("value", source.exact, op.frame), []).append((side, op))
    recomputed = [key for key in groups if key[0] == "recompute"]
    for source, op in forward_named:
        for key in recomputed:
            if (source.inst.opcode, shape_key(source.inst.shape)) == key[1:3] and op.frame == key[4] \
                    and ends_with(source.op_name, key[3]):
                groups[key].append(("forward", op))
    # How often the forward's fusions widen each forward value, by primitive, shape and frame.
    by_primitive: dict[tuple, Counter] = {}
    for source, op in forward_named:
        by_primitive.setdefault(_primitive(source, op.frame), Counter())[source.exact] += 1
    out = set(remat) - relaid
    decided = set(relaid)
    for key, members in groups.items():
        forward = sum(side == "forward" for side, _ in members)
        # A fusion only widening the value for recomputes is counted last (hloflops.remat.normalization).
        in_recompute = sorted((op for side, op in members if side == "recompute"),
                              key=lambda op: (widens_only(module.by_name[op.key[0]]), op.order))
        if not forward and key in primitive_of:
            # A recompute's value numbered apart from the forward's (it reads its input through
            # the checkpoint's barrier): where the forward's values of its primitive and shape in
            # its frame are all widened as often, so was its own forward value.
            counts = set(by_primitive.get(primitive_of[key], Counter()).values())
            if len(counts) == 1:
                forward = counts.pop()
        if not forward:
            continue  # the forward's widens are not in sight (another loop body): as decided
        for n, op in enumerate(in_recompute):
            decided.add(op.key)
            (out.add if n < forward else out.discard)(op.key)
    shared_converts: set[SiteKey] = set()
    settled = whole_checkpoint_widens(module, ops, index, remat, out, decided, relaid, shared_converts)
    # Not the whole-model rule's widens: its forward and recompute widens are settled otherwise,
    # and a value CSE shares between the forward and the recompute has its converts counted there.
    trips = _read_round_trips(module, index, decided - settled)
    for narrow, widen in trips:
        if narrow in shared_converts:
            continue
        decided.add(narrow)
        (out.add if widen in out else out.discard)(narrow)
    if not settled:
        stored = _stored_roundings(module, index, remat)
        out |= stored
        decided |= stored
    return out, decided, settled


def _primitive(source: SiteOp, frame) -> tuple:
    """The value's opcode, shape, primitive (its name's last component) and frame."""
    return source.inst.opcode, shape_key(source.inst.shape), source.op_name.rsplit("/", 1)[-1], frame


def _lone_recompute_widen(index: WidenIndex, comp: Computation, op: SiteOp, remat: set[SiteKey]) -> bool:
    """Is the widen alone in its fusion (`normalization.widens_only`), of a value a recompute
    computes, and read by recomputed ops only (a recompute fusion, see the module's docstring)?
    Its mark (the recompute's value) keeps it off `WidenIndex.side`'s recompute fusions."""
    if not op.marked or op.key in remat or not widens_only(comp):
        return False
    source = index.source(comp, op.inst.operands[0], op.key[2])
    if source is None or not source.marked or source.key not in remat:
        return False
    readers = index.reader_ops(op.key[0], op.key[2])
    return bool(readers) and all(reader is not None and reader.key in remat for reader in readers)


def _beside_a_forward_copy(index: WidenIndex, comp: Computation, op: SiteOp) -> bool:
    """Is the widen, in a fusion of recomputed ops alone (every named op marked, one of them
    remat) whose value `pairing` left to the forward's copy (no output remat), of a forward value
    the recompute reads (an unmarked named op's: a bias's cast)? See the module's docstring."""
    members = [m for m in (index.by_key.get((op.key[0], inst.name, op.key[2])) for inst in comp.instructions) if m]
    named = [m for m in members if m.op_name]
    if not named or not all(m.marked for m in named) or not any(m.key in index.remat for m in named):
        return False
    source = index.source(comp, op.inst.operands[0], op.key[2])
    return source is not None and not source.marked and bool(source.op_name)


def _stored_roundings(module: Module, index: WidenIndex, remat: set[SiteKey]) -> set[SiteKey]:
    """The lone narrowing fusions (XLA's `wrapped_convert`: a value computed in f32 elsewhere,
    stored rounded) that a recompute reads, of a value a forward fusion rounds itself from the
    f32 value (a round trip, `_read_round_trips`): the program without remat's forward reads the
    stored rounding instead, so one of the two roundings runs because of remat (base seed 54:
    softmax's `exp`, rounded by the forward's `e / s` fusion and stored rounded for the
    recompute's and the backward's; stored once in the program without remat, read by its
    forward too). As many stored roundings as the forward's fusions round the value are remat."""
    forward: dict[tuple, int] = {}
    widens = {op.key for op, _ in index.widens() if index.side(op.key[0], op.key[2]) == "forward"}
    for narrow, widen in _read_round_trips(module, index, widens):
        comp = module.by_name[narrow[0]]
        source = index.source(comp, comp.by_name[narrow[1]].operands[0], narrow[2])
        if source is not None:
            key = (source.exact, index.by_key[narrow].frame)
            forward[key] = forward.get(key, 0) + 1
    found: set[SiteKey] = set()
    for op in index.ops:
        comp = module.by_name.get(op.key[0])
        if op.key in remat or op.key[0] not in index.fused or comp is None or not _narrows_only(comp, op.inst):
            continue
        if not any(reader.key in remat for fusion in index.reader_fusions(op.key[0], op.key[2]) for reader in fusion):
            continue
        source = index.source(comp, op.inst.operands[0], op.key[2])
        if source is None:
            continue
        key = (source.exact, op.frame)
        if forward.get(key, 0) > 0:
            forward[key] -= 1
            found.add(op.key)
    return found


def _narrows_only(comp: Computation, inst: Instruction) -> bool:
    """Is the fused computation one unnamed narrowing of an f32 parameter, the instruction?"""
    if inst.opcode != "convert" or inst.op_name or inst.shape.element_type not in NARROW_FLOATS \
            or comp.root is not inst or not inst.operands:
        return False
    read = comp.by_name.get(inst.operands[0])
    return read is not None and read.opcode == "parameter" and read.shape.element_type == "f32" \
        and all(i.opcode == "parameter" or i is inst for i in comp.instructions)


def _read_round_trips(module: Module, index: WidenIndex, widens: set[SiteKey]) -> list[tuple[SiteKey, SiteKey]]:
    """(narrow, widen) for each decided widen of a value its fusion rounds from what it reads: an
    unnamed narrowing of a fusion parameter (an f32 value computed outside, a library fusion's
    matmul) read by that widen alone. XLA copies the rounding into every fusion reading the value,
    so it runs once per such fusion, as the widen does, and follows the widen's count."""
    found = []
    for key in widens:
        op = index.by_key.get(key)
        if op is None or not op.inst.operands:
            continue
        comp = module.by_name[key[0]]
        narrow = comp.by_name.get(op.inst.operands[0])
        if narrow is None or narrow.opcode != "convert" or narrow.op_name or not narrow.operands \
                or narrow.shape.element_type not in NARROW_FLOATS:
            continue
        if [user.name for user in comp.users.get(narrow.name, ())] != [op.inst.name]:
            continue
        read = comp.by_name.get(narrow.operands[0])
        while read is not None and read.opcode in ("bitcast", "reshape") and read.operands:
            read = comp.by_name.get(read.operands[0])
        if read is None or read.opcode != "parameter" or read.shape.element_type != "f32":
            continue
        narrow_key = (key[0], narrow.name, key[2])
        if narrow_key in index.by_key:
            found.append((narrow_key, key))
    return found


def _broadcast_operand(comp: Computation, inst: Instruction) -> bool:
    """Does the widen widen fewer elements than the fusion hands out (a bias, a row statistic
    broadcast into the value), not the value the fusion relays out?"""
    root = comp.root
    shapes = root.shape.tuple_shapes if root.shape.is_tuple else (root.shape,)
    return math.prod(inst.shape.dims) < max(math.prod(shape.dims) for shape in shapes)


def _reads_parameter(comp: Computation, inst: Instruction) -> bool:
    """Does the widen read a parameter of its fusion (a value from memory, not a round trip)?"""
    operand = comp.by_name.get(inst.operands[0])
    while operand is not None and operand.opcode in ("bitcast", "copy", "reshape"):
        operand = comp.by_name.get(operand.operands[0])
    return operand is not None and operand.opcode == "parameter"
