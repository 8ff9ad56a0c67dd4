"""Cheap recomputes that stand in for a copy the program without remat makes when it saves a
residual (hloflops.remat.pairing calls `saved_by_the_twin` after `fusion_copies`).

In a loop form (a scan or fori_loop over layers) the forward loop saves each residual the backward
reads by a dynamic-update-slice into a stack, and XLA fuses a cheap elementwise producer into that
saving fusion, copying it (it has other readers in the forward too). Under a remat policy that
does not save the value, the program with remat has no such save: its backward loop recomputes
the value instead, from what it did save. So where the backward loop materializes a cheap
recompute that a backward op reads, the program without remat computed it once more in its
forward (seed 32, relu under `dots_with_no_batch_dims_saveable`: `max(h, 0)` in the forward and
its recompute in the backward, against `max(h, 0)` in the forward and a copy of it in the fusion
that stores it into the saved stack). Nothing there runs because of remat.

The same stand-in shows, in any frame, where a backward matmul needs the value in another layout
(a conv kernel's gradient reads `relu(conv + b)` batch-minor): the program without remat relays
out its forward's value by a transposing fusion that copies the cheap producers, as the program
with remat does its recompute's (`hands_out_relayout`; seed 105 of the `more` family, a conv
net under `nn.remat` in a Python loop). Only the ops XLA copies into a consumer shared with one it
cannot fuse (the next conv) stand in so (`_duplicated_chain`): a residual sum reads two
full-size values, and the program without remat relays out its stored forward sum (seed 47).
A fusion's outputs are the cheap ops it hands out, through moves (an attention value `v + b`
handed out transposed heads-major by `bitcast(copy(transpose(...)))`; base seed 16).

A chain read off another elementwise fusion's result is one the program without remat stores and
saves stored (`_reads_elementwise_fusion`), unless XLA duplicates it into the saving fusion anyway:
a producer reading at most one full-size value is copied into every consumer that can fuse it,
whatever the others (`_duplicated_chain`; softmax's `p = e * (1 / s)` over the exponential's
fusion, saved for `dv = p.T @ dO` in Haiku's layer_stack attention, more seeds 94, 218). A matmul
without a name (a CPU library fusion) is the backward's where the pairing did not count it as a
recompute (the attention's `dO @ v.T` beside the recompute's `p @ v`, more seed 98)."""

from __future__ import annotations


from hloflops.remat.fusion_copies import fused_outputs
from hloflops.remat.op_kinds import DUPLICATED, EXPENSIVE, MATMUL_OPCODES
from hloflops.remat.names import REMAT_SCOPE, OpNames, ends_with, inner_tail
from hloparse.ir import CallRole, Computation, Instruction, Module
from hloflops.remat.sites import SiteKey, SiteOp, one_call_site, value_readers


# What a saving fusion copies: cheap elementwise ops. An op that computes more (a transcendental,
# a divide, a dot, a reduction) is never duplicated by XLA's fusion: the program without remat
# stores its forward fusion's output, and a recompute containing one is a recompute.
# A convert is left out: a recomputed cast (of a weight, of a bf16 activation) is no value the
# program without remat saves for a matmul (the BiLSTM of seed 97 casts its weights again).
CHEAP = DUPLICATED - EXPENSIVE - {"convert"}
# Ops that compute nothing: a saving fusion's chain may hold them.
_MOVES = frozenset({"parameter", "constant", "broadcast", "bitcast", "reshape", "transpose", "copy", "slice",
                    "dynamic-slice", "iota", "tuple", "get-tuple-element", "concatenate", "pad"})
# Readers that only hand a fusion's result on: its real readers are theirs.
_HANDS_ON = frozenset({"bitcast", "get-tuple-element", "reshape", "copy"})


def saved_by_the_twin(module: Module, ops: list[SiteOp], remat: set[SiteKey], op_names: OpNames
                      ) -> tuple[set[SiteKey], set[SiteKey]]:
    """The recompute less the cheap recomputes that replace a saving fusion's copy: a fusion in a
    loop body (not ENTRY) that computes only cheap elementwise ops, every output a remat-named
    recompute, whose result a backward op (not remat-named) reads, and whose outputs' forward
    runs in another loop body (an unmarked op of the same opcode and name inside the checkpoint),
    or, in any frame, whose outputs leave only through a transpose of XLA's that no other fusion
    makes of an equal value (`hands_out_relayout`). Returns the recompute and the ops decided
    (model FLOPs)."""
    if not module.is_scheduled:
        return remat, set()
    entry = module.entry.name
    fused = fused_outputs(module)
    sites, readers = sites_and_readers(module)
    by_fusion = _by_fusion(ops, fused)
    forward: dict[str, list[SiteOp]] = {}  # unmarked cheap ops of a loop body, by opcode
    for op in ops:
        if not op.marked and op.op_name and op.frame != entry and op.inst.opcode in CHEAP:
            forward.setdefault(op.inst.opcode, []).append(op)
    relaid: dict[object, set[str]] = {}  # the computations transposing each value (by exact value number)
    for op in ops:
        if op.inst.opcode == "transpose":
            relaid.setdefault(op.exact, set()).add(op.key[0])
    copies: dict[object, list[SiteOp]] = {}  # remat-named ops by value
    for op in ops:
        if op.named:
            copies.setdefault(op.exact, []).append(op)
    decided: set[SiteKey] = set()
    counted = {key[:2] for key in remat}
    for (comp_name, _site), members in by_fusion.items():
        site = sites.get(comp_name)
        if site is None:
            continue
        comp = module.by_name[comp_name]
        # A relayout the program also makes of the forward's value (a key transposed for the
        # forward's scores) is one the program without remat makes once, for both passes: the
        # recompute's copy of it, and of the cheap ops under it, is extra work.
        relayout = hands_out_relayout(comp) and all(
            relaid[op.exact] == {comp_name} for op in members if op.inst.opcode == "transpose")
        copied = _duplicated_chain(comp) if relayout else frozenset()
        if members[0].frame == entry and not relayout:
            continue
        if any(inst.opcode not in CHEAP and inst.opcode not in _MOVES for inst in comp.instructions):
            continue
        # A relayout's transpose computes nothing: the values it hands out are the cheap ops under it.
        outputs = [op for op in members if op.inst.name in fused[comp_name] and op.inst.opcode not in _MOVES]
        if not outputs or not all(op.named and op.key in remat and op.inst.opcode in CHEAP for op in outputs):
            continue
        if relayout and not all(op.inst.name in copied for op in outputs):
            continue  # the twin relays out the forward's stored value: it copies nothing
        if not read_by_backward_matmul(module, site, readers, op_names, counted=counted):
            continue
        # Reading another elementwise fusion's result, the value is saved stored by the twin
        # (`_reads_elementwise_fusion`), but where every reader fuses it (`_copied_for_weight_gradients`)
        # or XLA duplicates its chain into the saving fusion whatever its other readers do (each
        # output reads one full-size value: `_duplicated_chain`; softmax's `e * (1 / s)`): then
        # only that chain is the saving fusion's copy. Not for a value handed out reshaped that a
        # recomputed matmul reads too (`_copied_for_weight_gradients`): that stand-in is
        # hloflops.remat.twin_saves' (`weight_gradient_copies`).
        if not _copied_for_weight_gradients(comp, site, readers, op_names, module) and \
                _reads_elementwise_fusion(module, site):
            copied = _duplicated_chain(comp)
            if comp.root.opcode in ("bitcast", "reshape") or not all(op.inst.name in copied for op in outputs):
                continue
        if not relayout and not all(_forward_elsewhere(op, forward.get(op.inst.opcode, ())) for op in outputs):
            continue
        if not relayout and any(
                other.key not in remat and other.key[0] != comp_name and other.frame == op.frame
                for op in outputs for other in copies.get(op.exact, ())):
            # The twin saves a value once: where another recompute copy of it is left uncounted (a
            # key recomputed in two layouts, one counted against its forward: held-out more 167),
            # that one stands for the twin's saving copy, whichever of the two hands the value out
            # through moves (the linen LMs' key for the query's gradient, its copy transposed for
            # the recomputed scores uncounted: more 129, base 76).
            continue
        decided |= {op.key for op in members if op.key in remat and (not copied or op.inst.name in copied)}
    return remat - decided, decided


def weight_gradient_copies(module: Module, ops: list[SiteOp], op_names: OpNames) -> set[tuple[str, int]]:
    """The fusions of a loop body (computation and site) of cheap remat-named recomputes alone that
    hand their value out reshaped to backward matmuls (`_copied_for_weight_gradients`), also where
    a recomputed matmul reads it too: each stands for the copy the program without remat makes
    of its chain in the fusion saving that value for the weight's gradient, whatever else reads
    it (hloflops.remat.twin_saves counts it among that program's saving copies)."""
    if not module.is_scheduled:
        return set()
    entry = module.entry.name
    fused = fused_outputs(module)
    sites, readers = sites_and_readers(module)
    found: set[tuple[str, int]] = set()
    for (comp_name, site_index), members in _by_fusion(ops, fused).items():
        site = sites.get(comp_name)
        if site is None or members[0].frame == entry:
            continue
        comp = module.by_name[comp_name]
        if comp.root.opcode not in ("bitcast", "reshape") or \
                any(inst.opcode not in CHEAP and inst.opcode not in _MOVES for inst in comp.instructions):
            continue
        outputs = [op for op in members if op.inst.name in fused[comp_name]]
        if outputs and all(op.named and op.inst.opcode in CHEAP for op in outputs) and \
                read_by_backward_matmul(module, site, readers, op_names):
            found.add((comp_name, site_index))
    return found


def sites_and_readers(module: Module) -> tuple[dict[str, tuple[str, Instruction] | None],
                                               dict[tuple[str, str], list[Instruction]]]:
    """Each fused computation's one call site, as (the calling computation's name, the fusion),
    None where several call it; and each value's readers."""
    sites = {callee: None if call is None else (call[0].name, call[1])
             for callee, call in one_call_site(module).items()}
    return sites, value_readers(module)


def _by_fusion(ops: list[SiteOp], fused) -> dict[tuple[str, int], list[SiteOp]]:
    by_fusion: dict[tuple[str, int], list[SiteOp]] = {}
    for op in ops:
        if op.key[0] in fused:
            by_fusion.setdefault((op.key[0], op.key[2]), []).append(op)
    return by_fusion


def read_by_backward_matmul(module: Module, site: tuple[str, Instruction],
                             readers: dict[tuple[str, str], list[Instruction]], op_names: OpNames,
                             recompute: bool = False, counted: set[tuple[str, str]] | None = None) -> bool:
    """Does a matmul outside the recompute (named, not remat-named: a weight's gradient) read the
    fusion's result as it is? The program without remat must then save that very value. A value
    the backward reads only through other elementwise or reduce fusions (a residual sum feeding
    a layer norm's backward, seeds 131 and 135) is saved as something else (`x - mean`), which
    XLA builds from the forward's sum without copying the add: nothing offsets its recompute.
    With `recompute`: does a recomputed matmul (remat-named) read it instead? A matmul without a
    name (a CPU library fusion XLA left unnamed, the attention's `dO @ v.T` and the recompute's
    `p @ v`) is a recompute where the pairing counted it (`counted`: computation and name of the
    ops counted as recompute), else the backward's own."""
    comp_name, inst = site
    pending, seen = [inst], set()
    while pending:
        current = pending.pop()
        for reader in readers.get((comp_name, current.name), ()):
            if reader.name in seen:
                continue
            seen.add(reader.name)
            if reader.opcode in _HANDS_ON:
                pending.append(reader)
                continue
            if not _is_matmul(module, reader):
                continue
            name = op_names.of(comp_name, reader) or _name_handed_on(comp_name, reader, readers, op_names)
            if name:
                if (REMAT_SCOPE in name) == recompute:
                    return True
            elif counted is not None and _counted_matmul(module, comp_name, reader, counted) == recompute:
                return True
    return False


def _name_handed_on(comp_name: str, inst: Instruction, readers: dict[tuple[str, str], list[Instruction]],
                    op_names: OpNames) -> str:
    """The name of an op without metadata, from the ops that only hand its result on (a kernel
    gradient's library fusion carries none; the bitcast of its result carries the conv's name)."""
    pending, seen = [inst], set()
    while pending:
        for reader in readers.get((comp_name, pending.pop().name), ()):
            if reader.opcode in _HANDS_ON and reader.name not in seen:
                seen.add(reader.name)
                name = op_names.of(comp_name, reader)
                if name:
                    return name
                pending.append(reader)
    return ""


def _counted_matmul(module: Module, comp_name: str, inst: Instruction, counted: set[tuple[str, str]]) -> bool:
    """Is the matmul `inst` (or one in the fusion it calls) counted as recompute?"""
    if inst.opcode in MATMUL_OPCODES:
        return (comp_name, inst.name) in counted
    return any((callee, i.name) in counted for callee in inst.called(CallRole.FUSION) if callee in module.by_name
               for i in module.by_name[callee].instructions if i.opcode in MATMUL_OPCODES)


def _is_matmul(module: Module, inst: Instruction) -> bool:
    """A dot or convolution, or a fusion around one (CPU's library fusions)."""
    if inst.opcode in MATMUL_OPCODES:
        return True
    if inst.opcode != "fusion":
        return False
    return any(i.opcode in MATMUL_OPCODES for callee in inst.called(CallRole.FUSION)
               if callee in module.by_name for i in module.by_name[callee].instructions)


def _reads_elementwise_fusion(module: Module, site: tuple[str, Instruction]) -> bool:
    """Does the fusion read another elementwise fusion's result (a loop fusion, through views)?
    Then the program without remat stores its forward fusion's result, copying nothing (seed 12
    of the `more` family, gelu's product `(h + b) * 0.5 * (1 + t)` over `[batch, hidden]` reads
    the fusion of its tanh `t`, and the saving fusion of the program without remat reads the
    forward's product, which the next matmul reads as it is). Only a chain read off what the
    forward saved or a matmul computed (seed 32: `max(h, 0)` of a saved `h`) is copied, but for
    `_copied_for_weight_gradients`."""
    comp = module.by_name[site[0]]
    pending = list(site[1].operands)
    while pending:
        inst = comp.by_name.get(pending.pop())
        if inst is None:
            continue
        if inst.opcode in _HANDS_ON and inst.opcode != "get-tuple-element":
            pending += inst.operands
        elif inst.opcode in CHEAP or inst.opcode in EXPENSIVE or \
                (inst.opcode == "fusion" and inst.attributes.get("kind") in ("kLoop", "kInput")):
            return True
    return False


def _copied_for_weight_gradients(comp: Computation, site: tuple[str, Instruction],
                                 readers: dict[tuple[str, str], list[Instruction]], op_names: OpNames,
                                 module: Module) -> bool:
    """Does the fusion hand out its value reshaped (its root a bitcast or reshape: a
    `[batch, tokens, width]` activation as the `[batch * tokens, width]` operand of a weight's
    gradient) to backward matmuls alone, no recomputed one? The forward's matmul reads the value
    reshaped too, so in the program without remat every reader of the value is a fusion (the
    reshape's and the one saving it into the stack), and XLA copies the cheap chain into each,
    whatever the chain reads: a per-row statistic it broadcasts (seed 98 of the `more` family, a
    Haiku layer norm's `(x - mean) * rsqrt(var + eps) * scale + offset` under
    `dots_with_no_batch_dims_saveable`) or another fusion's result of its own size (the same
    seed's gelu product `(h + b) * 0.5 * (1 + t)` reading the fusion of its tanh `t`; seed 122,
    Flax's `nn.scan` of an LM block under `nothing_saveable`, too). Where the matmul reads the
    value as it is (`[batch, hidden]`, seed 12), XLA cannot fuse the value into that reader and
    stores it once, for both (`_reads_elementwise_fusion`). Where a recomputed matmul reads it too
    (base seed 135 under `nothing_saveable`), the recompute needs the value itself."""
    return comp.root.opcode in ("bitcast", "reshape") and \
        not read_by_backward_matmul(module, site, readers, op_names, recompute=True)


def hands_out_relayout(comp: Computation) -> bool:
    """Does the fusion hand its value out only in another layout (its root a transpose, or a copy
    of one)? Then it is the operand a matmul of the backward needs laid out its own way (a
    kernel's gradient reads the activation batch-minor), which the program without remat needs
    too, of the forward's value: XLA builds it there in a fusion of its own, copying the cheap
    producers into it as into every consumer (seed 105 of the `more` family: `relu(conv + b)`
    transposed for the next conv's kernel gradient, the add and max computed again in both
    programs). Only the cheap ops under the transpose are copies; where the fusion reads another
    elementwise fusion's result the twin reads the forward's (`_reads_elementwise_fusion`)."""
    root = comp.root
    if root.opcode == "copy" and root.operands and root.operands[0] in comp.by_name:
        root = comp.by_name[root.operands[0]]
    # XLA's own transpose (layout assignment's, no op_name), not the program's: a recompute's
    # `transpose` of its query to heads-major is part of the recompute (seed 3 of `base`).
    return root.opcode == "transpose" and not root.op_name and \
        (comp.root is root or not comp.root.op_name)


def _duplicated_chain(comp: Computation) -> frozenset[str]:
    """The ops of a relayout fusion that XLA copies into the twin's relayout of the forward's value:
    from the root down through moves and cheap ops that read at most one full-size value (XLA's
    `EffectivelyAtMostUnary`: a bias add, relu's max), stopping at a parameter or at an op that
    reads two (a residual add `x + conv(h) + b`). XLA duplicates a producer into a consumer only
    where it is effectively unary (`InstructionFusion::ComputeGloballyUnfusible`), or where it
    fuses into every consumer, which a forward value the next layer's matmul reads does not: the
    twin stores a residual sum once and relays out the stored value, so the program with remat
    recomputes that sum, and what is under it, only for the relayout (seed 47 of the `more`
    family: a nested remat's outer recompute of block_0's output, transposed for block_1's
    kernel gradient)."""
    found: set[str] = set()
    pending = [comp.root.name]
    while pending:
        inst = comp.by_name[pending.pop()]
        if inst.name in found or inst.opcode == "parameter":
            continue
        if inst.opcode not in _MOVES and not (inst.opcode in CHEAP and _at_most_unary(comp, inst)):
            continue
        found.add(inst.name)
        pending += [o for o in inst.operands if o in comp.by_name]
    return frozenset(found)


def _at_most_unary(comp: Computation, inst: Instruction) -> bool:
    """Does `inst` read at most one value as large as its result (a broadcast, an iota or a scalar
    constant is not one; XLA's test is the rank without unit dimensions)?"""
    rank = _true_rank(inst.shape.dims)
    large = 0
    for name in inst.operands:
        operand = comp.by_name.get(name)
        if operand is None or operand.opcode in ("broadcast", "iota"):
            continue
        if operand.opcode == "constant" and operand.shape.num_elements == 1:
            continue
        large += _true_rank(operand.shape.dims) >= rank
    return large <= 1


def _true_rank(dims: tuple[int, ...]) -> int:
    return sum(d != 1 for d in dims)


def _forward_elsewhere(op: SiteOp, candidates) -> bool:
    """An unmarked op of another loop body with the recompute's opcode and inner name: the
    forward the program without remat saves from."""
    tail = inner_tail(op.op_name)
    return any(twin.frame != op.frame and ends_with(twin.op_name, tail) for twin in candidates)
