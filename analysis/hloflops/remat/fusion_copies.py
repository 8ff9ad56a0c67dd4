"""Remat-named copies inside fusions. XLA's instruction fusion copies a cheap op into each fusion
that reads it, in the program with remat as in the one without, so a remat-named copy inside a
fusion is recompute only where that fusion's output is (hloflops.remat.pairing calls
`fusion_copies` after pairing by value and by signature)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Mapping

from hloflops.cost.rules import ELEMENTWISE_FLOP_OPCODES, TRANSCENDENTAL_OPCODES
from hloflops.scopes import phase
from hloparse.ir import CallRole, Module

if TYPE_CHECKING:
    from hloflops.remat.pairing import _Op

Key = tuple[str, str]  # (computation, instruction)
SiteKey = tuple[str, str, int]  # (computation, instruction, call site)


# Elementwise ops inside fusions: the ops whose remat-named copies `fusion_copies` looks at.
DUPLICATED = ELEMENTWISE_FLOP_OPCODES | TRANSCENDENTAL_OPCODES
# XLA's instruction fusion duplicates only cheap ops into each consumer, never an expensive one
# (transcendentals, divide, remainder: `InstructionFusion::IsExpensive`): a remat-named expensive
# op inside a fusion is a recompute of its own, and so are the cheap copies it reads there (seed
# 004: the recomputed bias add under a recomputed tanh, in the fusion of the input gradient).
EXPENSIVE = TRANSCENDENTAL_OPCODES | {"divide", "remainder"}


def fusion_copies(module: Module, ops: list[_Op], remat: set[SiteKey], model: set[SiteKey],
                   sizes: Counter | None = None, by_value: set[SiteKey] = frozenset()
                   ) -> tuple[set[SiteKey], set[SiteKey]]:
    """After optimization XLA copies a cheap elementwise op into every fusion that consumes it,
    with remat as without: a remat-named copy inside a fusion that computes a gradient (a
    fusion the program without remat has too) runs there in both programs, so it is not
    recompute, even where the forward's own copy is elsewhere. A copy runs because of remat
    exactly where the fusion it is copied into does: where the fusion's output is recompute
    (`remat`), not where its outputs are unmarked or the model's first computation of their
    value (`model`). Where an output is remat-named but paired with nothing (XLA reshaped the
    recompute differently from its forward), the copy keeps its own pairing's answer; so do
    the fusion's outputs themselves and unfused ops. A forward op (not marked) that XLA copied
    into a fusion computing a recompute runs there because of remat too (an embedding lookup
    fused into the recompute of the first layer norm), where the program computes its value
    elsewhere as well. Returns the recompute, and the copies this rule decided (either way)."""
    fused = fused_outputs(module)
    if not fused:
        return remat, set()
    by_key = {op.key: op for op in ops if op.key[0] in fused}
    feeds_expensive = _feeding_marked_expensive(module, fused, {op.key[:2] for op in by_key.values() if op.marked})
    twins = _reshaped_twins(module, ops, remat)
    remat = remat | set(twins)
    mirrored = _mirrored_chains(module, by_key, remat, twins)
    decided: dict[tuple[str, int], bool | None] = {}  # (fusion, site) -> do its copies run because of remat?
    out = set(remat)
    decided_copies: set[SiteKey] = set()
    for op in ops:
        comp_name, site = op.key[0], op.key[2]
        outputs = fused.get(comp_name)
        if outputs is None or op.inst.name in outputs or op.inst.opcode not in DUPLICATED:
            continue
        if (comp_name, site) not in decided:
            keys = [key for key in ((comp_name, name, site) for name in outputs) if key in by_key]
            if any(key in remat for key in keys):
                decided[(comp_name, site)] = True
            elif all(not by_key[key].marked or key in model for key in keys):
                decided[(comp_name, site)] = False
            else:
                decided[(comp_name, site)] = None
        runs = decided[(comp_name, site)]
        if runs is None:
            continue
        if op.key in by_value and (runs or not _computes_gradient(comp_name, site, outputs, by_key)):
            continue  # decided against its forward's copies (`_same_value`)
        if op.inst.opcode in EXPENSIVE:  # never XLA's duplicate: recompute with its fusion, else as paired
            if runs and op.marked:
                out.add(op.key)
                decided_copies.add(op.key)
        elif op.key[:2] in feeds_expensive:  # read by an expensive recompute: as paired (but `mirrored`, below)
            continue
        elif runs and op.marked and (sizes is None or sizes[op.exact] > 1 or op.key in remat):
            out.add(op.key)  # a copy of a recompute (its value is computed elsewhere too)
            decided_copies.add(op.key)
        elif runs and op.marked:
            continue  # the only op computing its value: no copy, the linearization's own, as paired
        elif runs and not op.marked:
            if op.op_name and phase(op.op_name) == "forward" and sizes is not None and sizes[op.exact] > 1:
                out.add(op.key)  # a forward value XLA copied into the recompute's fusion (an embedding lookup)
                decided_copies.add(op.key)
        else:
            out.discard(op.key)  # a cheap copy: the program without remat has it too
            decided_copies.add(op.key)
    # A forward op the expensive recompute reads, that its forward twin's fusion computes for the
    # twin too, is the recompute's copy of it, as long as the recompute's copies of its value
    # number fewer than the forward fusions' (each forward copy is recomputed once: gelu's bias
    # add, in the forward's one fusion, copied into the recompute's tanh fusion and into its
    # product's fusion, is recomputed once, in the product's; a layer norm's mean, in the forward's
    # rsqrt and normalizing fusions, twice).
    if not mirrored:
        return out, decided_copies
    counted = Counter(by_key[key].exact for key in out if key in by_key)
    in_forward = Counter(op.exact for op in by_key.values() if not op.marked and op.key not in out
                         and _computes_forward(op.key[0], op.key[2], fused[op.key[0]], by_key))
    for key in sorted(mirrored):
        value = by_key[key].exact
        if counted[value] < in_forward[value]:
            counted[value] += 1
            out.add(key)
            decided_copies.add(key)
    return out, decided_copies


def _computes_forward(comp_name: str, site: int, outputs: frozenset[str], by_key: Mapping[SiteKey, _Op]) -> bool:
    """Does the fusion hand out a value of the forward's own (an output named in the forward
    pass, not remat-named)?"""
    for name in outputs:
        op = by_key.get((comp_name, name, site))
        if op is not None and op.op_name and not op.marked and phase(op.op_name) == "forward":
            return True
    return False


def _computes_gradient(comp_name: str, site: int, outputs: frozenset[str], by_key: Mapping[SiteKey, _Op]) -> bool:
    """Does the fusion hand out a value of the backward's own (an output named in the backward
    pass, not remat-named)? Its cheap copies of a forward value run in the program without remat
    too: there the same gradient fusion copies the forward's op (seed 31: the bias add under
    relu's mask, in the mask's gradient fusion). A fusion whose outputs carry no name (a bf16
    convert of a recomputed product) tells nothing."""
    for name in outputs:
        op = by_key.get((comp_name, name, site))
        if op is not None and op.op_name and not op.marked and phase(op.op_name) == "backward":
            return True
    return False


def _reshaped_twins(module: Module, ops: list[_Op], remat: set[SiteKey]) -> dict[SiteKey, _Op]:
    """Remat-marked expensive elementwise ops of one operand, left unpaired, that apply their
    opcode to a value an unmarked op applies it to, read through bitcasts, reshapes and copies
    that only add or drop unit dimensions: each such op and its forward twin. A layer norm keeps
    its variance `[b, t, 1]`: XLA bitcasts the `[b, t]` sums for the recompute's `rsqrt` and not
    for the forward's, so the two rsqrts are two values to the numbering (a result shape of its
    own) though they hold the same elements, and the recompute's matched nothing (base draws 9,
    12, 13, 74, 96). Only these ops are matched so, after the pairing: numbering every value
    without its unit dimensions moves classes the pairing splits by how many copies the forward
    computes (more draws 9 and 88)."""
    wanted = [op for op in ops if op.marked and op.key not in remat and op.inst.opcode in EXPENSIVE
              and len(op.inst.operands) == 1]
    if not wanted:
        return {}
    by_key = {op.key: op for op in ops}
    forward: dict[tuple, _Op] = {}  # (opcode, element type, the operand's value) -> an unmarked op
    for op in ops:
        if not op.marked and op.inst.opcode in EXPENSIVE and len(op.inst.operands) == 1:
            read = _through_unit_views(module, op, by_key)
            if read is not None:
                forward.setdefault((op.inst.opcode, op.inst.shape.element_type, read.exact), op)
    out: dict[SiteKey, _Op] = {}
    for op in wanted:
        read = _through_unit_views(module, op, by_key)
        twin = forward.get((op.inst.opcode, op.inst.shape.element_type, read.exact)) if read is not None else None
        if twin is not None and twin.frame == op.frame:
            out[op.key] = twin
    return out


def _through_unit_views(module: Module, op: _Op, by_key: Mapping[SiteKey, _Op]) -> _Op | None:
    """The op whose value `op` reads as its one operand, through copies and through bitcasts and
    reshapes that only add or drop unit dimensions (None where the chain does more)."""
    comp = module.by_name[op.key[0]]
    inst = comp.by_name.get(op.inst.operands[0])
    while inst is not None and inst.opcode in ("copy", "bitcast", "reshape") and len(inst.operands) == 1:
        source = comp.by_name.get(inst.operands[0])
        if source is None or _unit_free(source.shape) != _unit_free(inst.shape):
            return None
        inst = source
    return by_key.get((op.key[0], inst.name, op.key[2])) if inst is not None else None


def _unit_free(shape) -> tuple | None:
    """The shape's element type, its dimensions but the unit ones, and their order in memory
    (minor to major, by rank among those dimensions): equal for two shapes that hold the same
    elements in the same places. None for a tiled layout."""
    if shape.is_tuple:
        return None
    layout = shape.layout
    if layout is not None and layout.details:
        return None
    order = layout.minor_to_major if layout is not None and layout.minor_to_major \
        else tuple(reversed(range(len(shape.dims))))
    kept = [d for d in range(len(shape.dims)) if shape.dims[d] != 1]
    rank = {d: i for i, d in enumerate(kept)}
    return (shape.element_type, tuple(shape.dims[d] for d in kept), tuple(rank[d] for d in order if d in rank))


def _mirrored_chains(module: Module, by_key: Mapping[SiteKey, _Op], remat: set[SiteKey],
                     twins: Mapping[SiteKey, _Op]) -> set[SiteKey]:
    """The unmarked ops an expensive recompute reads inside its fusion whose values its forward
    twin (an unmarked expensive op of the same value) also reads inside its own fusion. XLA never
    copies the expensive op, so each of the two fusions computes the cheap chain under it for
    itself: the recompute's copy of the chain runs because of remat, though CSE merged the
    recompute's own chain into the forward's and left it the forward's name (seed 74: a layer
    norm's `max(mean(x*x) - mean(x)^2, 0) + eps` under the recompute's `rsqrt`, prevent_cse=False).
    A chain above a residual the policy saves (its name's reduce-precision marker), or one the
    forward twin does not compute for itself (it reads the value from another fusion), is the
    input the recompute reads, copied there as XLA copies it into any reader, and keeps its
    pairing (the saved `x` under gelu's recomputed `tanh`: base draws 0, 3 and 75 would count
    its bias add once too often). Only ops named in the forward pass: an unnamed one (XLA's
    widening of a bf16 input) is the fusion's own (more draw 9)."""
    reads: dict[SiteKey, list[SiteKey]] = {}  # an expensive op -> the ops it reads in its fusion
    for key, op in by_key.items():
        if op.inst.opcode not in EXPENSIVE:
            continue
        comp = module.by_name[key[0]]
        found, pending = set(), list(op.inst.operands)
        while pending:
            name = pending.pop()
            if name in found or name not in comp.by_name:
                continue
            inst = comp.by_name[name]
            if inst.opcode == "reduce-precision":  # a policy's saved residual: what lies above is the input
                continue
            found.add(name)
            pending += inst.operands
        reads[key] = [(key[0], name, key[2]) for name in found if (key[0], name, key[2]) in by_key]
    twin_reads: dict[object, set] = {}  # an unmarked expensive op's value -> the values it reads in its fusion
    for key, read in reads.items():
        op = by_key[key]
        if not op.marked:
            twin_reads.setdefault(op.exact, set()).update(by_key[k].exact for k in read)
    out: set[SiteKey] = set()
    for key, read in reads.items():
        op = by_key[key]
        value = twins[key].exact if key in twins else op.exact
        if op.marked and key in remat and value in twin_reads:
            out.update(k for k in read if not by_key[k].marked and by_key[k].exact in twin_reads[value]
                       and by_key[k].op_name and phase(by_key[k].op_name) == "forward")
    return out


def _feeding_marked_expensive(module: Module, fused: Mapping[str, frozenset[str]], marked: set[Key]) -> set[Key]:
    """The ops of fused computations that a remat-marked expensive op of the same fusion reads,
    directly or through other ops: a chain XLA's fusion would not have duplicated by itself."""
    found: set[Key] = set()
    for name in fused:
        comp = module.by_name.get(name)
        if comp is None:
            continue
        pending = [inst.name for inst in comp.instructions
                   if inst.opcode in EXPENSIVE and (name, inst.name) in marked]
        while pending:
            inst = comp.by_name[pending.pop()]
            for operand in inst.operands:
                if operand in comp.by_name and (name, operand) not in found:
                    found.add((name, operand))
                    pending.append(operand)
    return found


# Ops that hand on their operand's elements unchanged: a fusion's output through them is the operand.
_LOOKS_THROUGH = frozenset({"bitcast", "copy", "reshape", "transpose", "broadcast"})


def fused_outputs(module: Module) -> dict[str, frozenset[str]]:
    """Each fused computation's outputs: the ops whose values leave it (the root, a tuple
    root's elements, through reshapes and copies)."""
    names = {callee for _, inst in module.instructions() if inst.opcode == "fusion"
             for callee in inst.called(CallRole.FUSION)}
    out: dict[str, frozenset[str]] = {}
    for name in names:
        comp = module.by_name.get(name)
        if comp is None or not comp.instructions:
            continue
        pending, found = [comp.root.name], set()
        while pending:
            inst = comp.by_name[pending.pop()]
            found.add(inst.name)
            if inst.opcode == "tuple" or inst.opcode in _LOOKS_THROUGH:
                pending += [o for o in inst.operands if o in comp.by_name and o not in found]
        out[name] = frozenset(found)
    return out
