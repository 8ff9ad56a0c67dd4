"""Which of the cheap recomputes paired with their forward in another loop body rest on how XLA
fused the two programs (hloflops.remat.pairing: such ops are hinges of `remat_flops_bounds`).

After optimization XLA copies a cheap elementwise value into every fusion that reads it: the
forward loop into its consumers, the backward loop's recompute into its own, and the program
without remat into its forward consumers and the fusions that save the value for the backward (seed
98 of the `more` family, a layer norm's output: one forward copy and one recompute with remat, two
forward copies without). How many of the recompute's copies run because of remat then depends on
the program without remat's fusion. A copy is sure where the program without remat can have no
counterpart of it: an expensive op (never duplicated by fusion), what feeds a recomputed expensive
op (but a residual, a value the backward loop's gradient fusions copy too: the program without
remat may copy it into more fusions saving residuals, `_saved_more_often`; and then the other
cheap ops of a recompute fusion copying it are not sure either, `_fused_with`), a value read only by
the recompute itself (the input of the next layer's recomputed matmul: the program without remat
reads the forward's), and a chain that reads two values as large as its own (silu's `h *
sigmoid(h)` in seed 000: XLA stores such a result rather than copy the chain into the fusion saving
it, so the program without remat reads its forward's value; the recompute's copy is one of its
own), unless its fusion hands it out reshaped (`_hands_out_reshaped`: XLA copies it into the saving
fusion after all).

The same holds for the copies of a value whose every copy is remat-marked, counted against the
forward's copies found by signature and name in another loop body (`ForwardTwins`): the program
without remat's forward loop is fused otherwise than this one's (it saves residuals this program
recomputes, materializes what they are computed from, and copies cheap producers into each of
those fusions), so how many copies run because of remat rests on fusion too. Such a copy is
counted by the class's number, not by the fusion it sits in, so the last exemption above is not
its own: more seeds 33, 37, 69, 148 (gelu MLPs in `nnx.scan` and `hk.layer_stack`, two of them
under offload policies) copy the bias add and `1 + tanh` into the recompute's gelu product fusion
and count them sure, where the program without remat copies the bias add into four fusions of
its forward and this program into one: add +3,072 to +98,304, inside the range (and exact since
hloflops.remat.twin_saves, which counts such copies against the saving fusions, but seed 37)."""

from __future__ import annotations

from typing import Iterator

from hloflops.remat.fusion_copies import feeding_marked_expensive, fused_outputs
from hloflops.remat.op_kinds import DUPLICATED, EXPENSIVE, largest_array
from hloparse.ir import CallRole, Module
from hloflops.remat.sites import Key, SiteKey, SiteOp, value_readers


# Readers that only hand a value on: their own readers are the value's.
_HANDS_ON = frozenset({"bitcast", "get-tuple-element", "reshape", "copy", "transpose", "tuple"})
_MOVES = frozenset({"bitcast", "reshape", "copy", "transpose", "broadcast", "tuple"})


def _reads_two_whole_values(module: Module, site: Key) -> bool:
    """Does the instruction read two values as large as its own (a gelu product of `h` and its
    tanh's fusion, silu's `h * sigmoid(h)`)? XLA does not copy such a chain into the fusion that
    saves its value (it would read two values to store one): the program without remat stores the
    forward's result, and the recompute's copy is one of its own."""
    comp = module.by_name[site[0]]
    inst = comp.by_name[site[1]]
    size = largest_array(inst.shape)
    whole = [name for name in inst.operands if name in comp.by_name and largest_array(comp.by_name[name].shape) >= size]
    return len(whole) >= 2


def _hands_out_reshaped(module: Module, site: Key) -> bool:
    """Is the instruction a fusion whose root is a bitcast or reshape (a `[batch, tokens, features]`
    value handed out flattened, as a matmul's operand)? Then the forward's value, too, reaches its
    matmul through a reshape, and XLA's fusion sees only fusible consumers (the reshape, the fusion
    saving the value): it copies the chain into both, two whole operands or not (more seed 126,
    gelu's `(0.5 * h) * (1 + t)`: the program without remat computes it in the fusion flattening
    it for the next matmul and again in the fusion saving it). Where the matmul reads the value
    as it is (silu's `h * sigmoid(h)` of seed 000, two-dimensional), the matmul cannot fuse it
    and XLA stores it once."""
    comp = module.by_name[site[0]]
    inst = comp.by_name[site[1]]
    if inst.opcode != "fusion":
        return False
    callees = inst.called(CallRole.FUSION)
    return len(callees) == 1 and callees[0] in module.by_name and \
        module.by_name[callees[0]].root.opcode in ("bitcast", "reshape")


def resting_on_fusion(module: Module, ops: list[SiteOp], across: set[SiteKey], remat: set[SiteKey],
                      cheap: frozenset[str], counted: set[SiteKey] = frozenset()) -> set[SiteKey]:
    """The ops of `across` (recomputes paired with an op of another frame) and of `counted` (copies
    of a class counted against its forward's copies in another frame, `ForwardTwins`) of a `cheap`
    opcode that are not sure (see the module docstring). A counted copy is the class's by number,
    not by the fusion it sits in: one inside a fusion reading two whole values (a gelu product's)
    may stand for a copy elsewhere, and that exemption is not its own."""
    candidates = [op for op in ops if (op.key in across or op.key in counted) and op.key in remat
                  and op.inst.opcode in cheap and op.inst.opcode not in EXPENSIVE]
    if not candidates or not module.is_scheduled:
        return set()
    fused = fused_outputs(module)
    feeds_expensive = feeding_marked_expensive(module, fused, {op.key[:2] for op in ops if op.marked})
    recompute = {key[:2] for key in remat}
    recomputing = {name for name in fused if any((name, inst.name) in recompute
                                                 for inst in module.by_name[name].instructions)}
    readers, calls = _readers_and_callers(module)
    sites: dict[str, Key] = {callee: (comp_name, inst.name) for callee, (comp_name, inst) in calls.items()}

    def read_only_by_recompute(key: Key) -> bool:
        comp_name = key[0]
        found = False
        for reader in _end_readers(readers, comp_name, key[1]):
            if (comp_name, reader.name) not in recompute and \
                    not any(callee in recomputing for callee in reader.called(CallRole.FUSION)):
                return False
            found = True
        return found

    residuals = _saved_more_often(module, ops, fused)
    out: set[SiteKey] = set()
    for op in candidates:
        if op.exact in residuals:  # the program without remat may copy it into more saving fusions
            out.add(op.key)
            continue
        if op.key[:2] in feeds_expensive:
            continue
        site = sites.get(op.key[0]) if op.key[0] in fused else op.key[:2]
        if site is not None and (read_only_by_recompute(site) or
                                 (op.key in across and _reads_two_whole_values(module, site)
                                  and not _hands_out_reshaped(module, site))):
            continue
        out.add(op.key)
    return out


def _saved_more_often(module: Module, ops: list[SiteOp], fused: dict[str, frozenset[str]]) -> set:
    """The values (exact numbers) of a backward loop whose recompute copies may stand for copies the
    program without remat makes to save residuals. Per value, the program with remat computes it
    in the backward loop's recompute fusions and in the gradient fusions that copy it (a remat-marked
    op inside a fusion of a loop body none of whose outputs is remat-marked); the program without
    remat reads every residual stored, computing the value once in the fusion saving each residual
    whose cheap chain holds it. Counting a value's recompute copies and not its gradient copies is
    right where it is saved as often as the gradient fusions copy it (seed 000: silu's `h = x @ w +
    b`, copied into one gradient fusion, saved once: its recompute is recompute); where it is in
    more residuals' chains, some recompute copies stand for saving copies. Such a value: copied into
    a gradient fusion and also in the cheap chain (no expensive op between, `cheap_chain`) of a
    recompute fusion's output a backward op reads (base seeds 16 and 76, gelu's `h`: copied into
    the gradient's fusion, and in the recomputed product `0.5 * h * (1 + t)` that Dense_1's weight
    gradient reads; the program without remat copies it into three fusions saving gelu's residuals).

    With such a value go the cheap ops of every recompute fusion that copies it (`_fused_with`):
    the program without remat computes that chain in its forward loop, fused as this recompute is
    (it materializes the residuals it saves, gelu's tanh and product, and copies `h` into each of
    those fusions), where this program's forward saves nothing and computes the chain in one
    fusion. The program without remat then runs `h` more often than this program in all (base
    seeds 16, 76, held-out 192: `h` five times, its forward's two and three saving copies, against
    this program's four), beyond what the recompute's copy of `h` can stand for. The rest of the
    recompute fusion (gelu's `x**3`, `0.044715 *`, `+`, `* sqrt(2/pi)`) is what offsets it, so
    each of its ops is a hinge too: remat FLOPs are never negative per op, and a lower bound that
    may drop them is how the split says the twin's extra copies may cancel them."""
    entry = module.entry.name
    by_site: dict[tuple[str, int], list[SiteOp]] = {}
    marked = {op.key[:2] for op in ops if op.marked}
    for op in ops:
        if op.key[0] in fused:
            by_site.setdefault((op.key[0], op.key[2]), []).append(op)
    readers, calls = _readers_and_callers(module)
    marked_fusions = {name for (name, _), members in by_site.items()
                      if any(op.marked and op.inst.name in fused[name] for op in members)}

    def read_by_backward(comp_name: str, name: str) -> bool:
        for reader in _end_readers(readers, comp_name, name):
            if reader.opcode == "fusion":
                if not any(callee in marked_fusions for callee in reader.called(CallRole.FUSION)):
                    return True
            elif (comp_name, reader.name) not in marked:
                return True
        return False

    gradient: set = set()
    in_residuals: set = set()
    recomputing: list[list[SiteOp]] = []
    for (comp_name, site), members in by_site.items():
        if members[0].frame == entry:
            continue
        if comp_name not in marked_fusions:
            gradient |= {op.exact for op in members if op.marked}
            continue
        recomputing.append(members)
        call = calls.get(comp_name)
        if call is None or not read_by_backward(call[0], call[1].name):
            continue
        by_name = {op.inst.name: op for op in members}
        in_residuals |= {by_name[name].exact for name in cheap_chain(module.by_name[comp_name], fused[comp_name])
                         if name in by_name and by_name[name].marked}
    return _fused_with(gradient & in_residuals, recomputing)


def _fused_with(values: set, recomputing: list[list[SiteOp]]) -> set:
    """`values`, and the values of the cheap remat-marked ops of each recompute fusion (given by its
    members) that copies one of them (see `_saved_more_often`)."""
    found = set(values)
    for members in recomputing:
        if any(op.marked and op.exact in values for op in members):
            found |= {op.exact for op in members if op.marked and op.inst.opcode in DUPLICATED
                      and op.inst.opcode not in EXPENSIVE}
    return found


def cheap_chain(comp, outputs: frozenset[str]) -> set[str]:
    """The ops of a fused computation its outputs are computed from through cheap elementwise ops
    and moves alone (an expensive op, a reduction or a parameter ends the chain): what XLA copies
    into a fusion saving the output. An op reading two values as large as its own ends it too
    (XLA stores such a result rather than copy its chain: silu's `h * sigmoid(h)` in seed 000),
    unless the fusion hands its result out reshaped (XLA copies it after all: gelu's product in
    base seed 16; `reads_two_whole`)."""
    reshaped = comp.root.opcode in ("bitcast", "reshape")
    found: set[str] = set()
    pending = list(outputs)
    while pending:
        inst = comp.by_name.get(pending.pop())
        if inst is None or inst.name in found or inst.opcode in EXPENSIVE or inst.opcode == "parameter":
            continue
        if inst.opcode not in DUPLICATED and inst.opcode not in _MOVES:
            continue
        found.add(inst.name)
        if not reads_two_whole(comp, inst) or reshaped or inst.opcode in _MOVES:
            pending += inst.operands
    return found


def reads_two_whole(comp, inst) -> bool:
    """Does an op read two values as large as its own (broadcasts and iotas aside)? XLA stores
    such a result rather than copy its chain into the fusions reading it (`cheap_chain`)."""
    size = largest_array(inst.shape)
    return sum(o in comp.by_name and comp.by_name[o].opcode not in ("broadcast", "iota")
               and largest_array(comp.by_name[o].shape) >= size for o in inst.operands) >= 2


def _readers_and_callers(module: Module) -> tuple[dict[Key, list], dict[str, tuple[str, object]]]:
    """Each value's readers ((computation, name) -> instructions reading it), and each fused
    computation's fusion instruction with the computation it sits in."""
    calls: dict[str, tuple[str, object]] = {}
    for comp, inst in module.instructions():
        if inst.opcode == "fusion":
            for callee in inst.called(CallRole.FUSION):
                calls[callee] = (comp.name, inst)
    return value_readers(module), calls


def _end_readers(readers: dict[Key, list], comp_name: str, name: str) -> Iterator:
    """The instructions that read a value of `comp_name`, looking through the ops that only hand
    it on (`_HANDS_ON`: views, copies, tuples), each once, lazily (a caller may stop at the first)."""
    pending, seen = [name], set()
    while pending:
        for reader in readers.get((comp_name, pending.pop()), ()):
            if reader.name in seen:
                continue
            seen.add(reader.name)
            if reader.opcode in _HANDS_ON:
                pending.append(reader.name)
            else:
                yield reader
