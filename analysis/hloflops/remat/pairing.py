"""Which instructions are real recomputation: pairing each remat-marked op with an op that
computes the same value (see analysis/remat/__init__.py for the rules and why)."""

from __future__ import annotations

from collections import Counter
from itertools import chain, compress, count
from dataclasses import dataclass
from typing import Iterable, Mapping

from hloflops.remat.names import (
    REMAT_SCOPE, XLA_REMAT_SUFFIX, OldRematFrames, OpNames, ends_with, inner_tail, old_remat_frames, remat_depth,
    site_names,
)
from hloflops.remat.across_loops import resting_on_fusion
from hloflops.remat.forward_twins import ForwardTwins, NamedForward, same_inputs
from hloflops.remat.inputs import FrameInputs
from hloflops.remat.marks import (
    casts_in_checkpoint_transpose, constants_in_checkpoint_transpose, folded_without_barrier, inherit_names,
    named_by_users,
)
from hloflops.remat.collectives import collectives_of_recomputes
from hloflops.remat.fusion_copies import fused_outputs, fusion_copies
from hloflops.remat.view_copies import view_copies
from hloflops.remat.saved_copies import saved_by_the_twin
from hloflops.remat.signature import signature
from hloflops.remat.rounding import is_identity_rounding, widened_roundings
from hloflops.remat.op_kinds import DUPLICATED, is_memory_placement, shape_key
from hloflops.remat.values import Numbered, Val, ValueNumbers, numbered
from hloflops.remat.views import VIEW_OPCODES
from hloflops.scopes import model_components, phase, split_components
from hloparse.ir import CallRole, Computation, Instruction, Module

Key = tuple[str, str]  # (computation, instruction)
SiteKey = tuple[str, str, int]  # (computation, instruction, call site): an op as the pairing sees it

# Instructions that hand on a value computed elsewhere (or hold no computation of their own):
# they never pair, so a fusion and its root, or a copy and its operand, are not twins. Nor does
# a custom-call that moves a value between memories (`is_memory_placement`): the recompute's
# move back to the device computes nothing again.
PASS_THROUGH = frozenset({"parameter", "fusion", "call", "tuple", "get-tuple-element", "copy",
                          "opt-barrier", "while", "conditional", "constant", "bitcast",
                          "async-start", "async-update", "async-done"})
MATMUL_OPCODES = frozenset({"dot", "convolution"})


@dataclass(frozen=True)
class RematIndex:
    """Which instructions of a module are real recomputation."""

    remat: frozenset[Key]
    remat_named: int  # instructions carrying a remat name (some may be merged by CSE)
    merged: tuple[Key, ...]  # remat-named but left without a twin: counted as model FLOPs
    # Where the split is not established (`Report.remat_flops_bounds`): remat on a weaker pairing
    # than an equal value (a signature in the recompute's own frame whose inputs could not be
    # compared; after optimization a cheap op the fusion rules decided),
    # and unpaired remat-named ops that no rule showed to be model FLOPs (a fusion's copy of a
    # gradient, CSE's merge of a recompute into its forward).
    weak: frozenset[Key] = frozenset()
    unsure: frozenset[Key] = frozenset()

    def __contains__(self, key: Key) -> bool:
        return key in self.remat

    @property
    def unpaired(self) -> tuple[Key, ...]:
        return self.merged


@dataclass(slots=True, eq=False)
class _Op:
    key: SiteKey
    inst: Instruction
    op_name: str
    named: bool  # carries a remat name
    marked: bool  # named, or computed from an optimization barrier's output
    order: int
    exact: Val
    abstract: Val
    frame: str
    inherited: bool = False  # named by its inputs (`inherit_names`), not by its own op_name


def find_remat(module: Module, computations: Iterable[Computation] | None = None,
               op_names: OpNames | None = None, values: ValueNumbers | None = None) -> RematIndex:
    comps = list(computations) if computations is not None else list(module.computations)
    op_names = op_names or OpNames(module)
    clones = _has_clones(comps)
    # One look through the names: jax's scope and older jax's frame both hold `remat`. Most
    # modules have neither, and this look is most of their remat pass.
    remat_named = op_names.any_name_holds("remat", comps)
    old = old_remat_frames(op_names, comps) if remat_named else None  # older jax's `remat` frame
    if values is None:
        opcodes = _opcodes(module)
        # Nothing can be marked without a remat name, a `.remat` clone or an optimization barrier
        # (a clone outside `comps` marks none of theirs): nothing is remat, and the value
        # numbering, the costliest part of the pass, is not needed.
        if not (remat_named or clones or "opt-barrier" in opcodes):
            return RematIndex(frozenset(), 0, ())  # what the pairing below finds when nothing is marked
        # Abstract numbers are read only across frames (`_across_frames`): not needed without loops.
        numbers = numbered(module, "while" in opcodes)
    else:
        numbers = Numbered.of(module, values)
    if old is None and _one_frame_unnamed(comps, numbers, op_names, clones, remat_named):
        return _by_value_only(comps, numbers, op_names)
    ops: list[_Op] = []
    order = count()
    prefixes: dict[int, str] = {}
    for comp in comps:
        comp_name = comp.name
        # One op per instruction and call site: a callee called from several sites (one per
        # layer) computes a value of its own at each, under that site's name.
        shared = comp_name in numbers.shared
        for site, (frame, comp_numbers) in enumerate(numbers.numbers_per_site(comp)):
            moved = _whole_views(comp, [n[0] for n in comp_numbers])
            names = site_names(module, op_names, comp, numbers.chains[comp_name][site], prefixes) if shared \
                else op_names.names_in(comp)
            ops += [_Op((comp_name, inst.name, site), inst, op_name, named, named or taint, next(order), exact,
                        abstract, frame)
                    for inst, op_name, (exact, abstract, taint) in zip(comp.instructions, names, comp_numbers)
                    if _can_pair(inst, moved)
                    for named in (_is_named(inst, op_name, old),)]

    if remat_named:
        inherit_names(module, ops, op_names)
    clone_keys = _clones(comps) if clones else set()
    if not any(op.marked for op in ops):  # nothing names or taints a recompute: no pairing to do
        return RematIndex(frozenset(clone_keys), 0, ())
    remat: set[SiteKey] = set()
    sizes = Counter([op.exact for op in ops])  # how many ops compute each value
    if remat_named:
        named_by_users(module, ops, op_names, sizes)
        if module.is_scheduled:
            casts_in_checkpoint_transpose(module, ops, op_names, sizes)
    first_of_class: set[SiteKey] = set()
    fused = {callee for _, inst in module.instructions() if inst.opcode == "fusion"
             for callee in inst.called(CallRole.FUSION)}
    by_value: set[SiteKey] = set()  # marked copies of a value whose forward computation is in sight
    elsewhere = _forward_copies(ops) if not module.is_scheduled else None
    named_forward = NamedForward(module, ops) if elsewhere is not None and remat_named else None
    classes = list(_classes([op for op in ops if sizes[op.exact] > 1], exact=True).values())
    all_marked = [members for members in classes if all(m.marked for m in members)]
    forward_of = ForwardTwins(module, ops).counts(all_marked) if module.is_scheduled and remat_named and \
        all_marked else {}
    for members in classes:
        forward = forward_of.get(id(members), 0)
        remat |= _same_value(members, first_of_class, fused, forward, elsewhere, named_forward)
        if forward or not all(m.marked for m in members):
            by_value.update(m.key for m in members if m.marked and m.op_name)
    certain = first_of_class | {op.key for op in ops if op.named and sizes[op.exact] > 1}  # decided by value
    named_ops = [op for op in ops if op.named]
    weak: set[SiteKey] = set()  # paired by signature in the recompute's own frame
    across: set[SiteKey] = set()  # paired with an op of another loop body
    if named_ops:
        # Before optimization, the marked copies of a value beyond what its forward computes are
        # the linearization's own (`_same_value`), and so is what reads them (seed 55: jvp's
        # `3 * x**2` for gelu's derivative, whose multiply would pair with the loss's by signature).
        # A broadcast computes nothing: its copies of a scalar (layer norm's `n - ddof`, built in
        # place at each of `jit(_var)`'s call sites) are no linearization work to follow.
        own = {op.key for op in named_ops if sizes[op.exact] > 1 and op.key not in remat
               and op.key not in first_of_class and op.inst.opcode != "broadcast"} \
            if not module.is_scheduled else set()
        paired, weak, across = _by_signature(ops, named_ops, sizes, remat | first_of_class, module, own)
        remat |= paired
    across |= _across_frames(ops, sizes, remat | first_of_class, remat_named)
    remat |= across
    # Equal values, signatures, the same computation in another loop; but after optimization a
    # cheap copy paired with its forward in another loop body may stand for a copy the program
    # without remat makes to save the value (hloflops.remat.across_loops): it rests on fusion.
    paired_by_value = remat - resting_on_fusion(module, ops, across, remat, DUPLICATED)
    remat, copies, stand_ins = fusion_copies(module, ops, remat, first_of_class, sizes, by_value)
    certain |= copies
    remat, laid_out = view_copies(module, ops, remat)
    certain -= laid_out  # model FLOPs on how XLA fused the program without remat: unsure
    if remat_named:
        remat, saved = saved_by_the_twin(module, ops, remat, op_names)
        certain |= saved
        # A forward copy in a fusion that stands in for the twin's saving or relayout copy is settled.
        settled = {(key[0], key[2]) for key in saved}
        stand_ins = {key for key in stand_ins if (key[0], key[2]) not in settled}
    remat |= {op.key for op in ops if is_identity_rounding(op.inst)}  # a policy's saved residual
    if remat_named:
        remat |= widened_roundings(module, ((op.key, op.inst) for op in ops))
    if not module.is_scheduled:
        remat |= folded_without_barrier(module, ops)
    elif remat_named:
        remat |= constants_in_checkpoint_transpose(module, ops)
    # A sharded recompute's collectives (its partial sums' all-reduce): recompute where what they
    # reduce is (hloflops.remat.collectives), as sure as that; a variadic one only partly: unsure.
    collectives, sure_collectives, partly = collectives_of_recomputes(
        module, ((op.key, op.inst, op.marked) for op in ops), remat, paired_by_value - weak)
    remat |= collectives
    paired_by_value |= sure_collectives
    # Older jax's frame holds the checkpoint's backward ops too: without a twin such an op is
    # backward work, not a recompute CSE merged, and is not listed as one.
    listed = [op for op in named_ops if not op.inherited and (old is None or op.op_name not in old)]
    index = _per_instruction(ops, named_ops, listed, remat, clone_keys)
    # After optimization, what the fusion rules (copies, saved copies, roundings) decide for a cheap
    # op rests on how XLA fused the two programs, not on an equal value: the range covers it.
    loose = {op.key for op in ops if op.inst.opcode not in MATMUL_OPCODES} & (remat - paired_by_value) \
        if module.is_scheduled else set()
    # Before optimization (a module XLA has not scheduled) no CSE has merged a recompute into its
    # forward: a remat-named op without a twin is the linearization's own work, not a recompute.
    unsure = {op.key[:2] for op in listed if op.key not in remat and op.key not in certain} \
        | {key[:2] for key in stand_ins} if module.is_scheduled else set()
    return RematIndex(index.remat, index.remat_named, index.merged,
                      frozenset(key[:2] for key in (weak - copies) | loose if key in remat) & index.remat,
                      frozenset(unsure | partly) - index.remat)


def _can_pair(inst: Instruction, moved: set[str]) -> bool:
    """Does the instruction compute a value of its own that can pair (not one it hands on:
    `PASS_THROUGH`, a whole view in `moved`, a move between memories)?"""
    return inst.opcode not in PASS_THROUGH and inst.name not in moved and \
        (inst.opcode != "custom-call" or not is_memory_placement(inst))


def _whole_views(comp: Computation, exacts: list[Val]) -> set[str]:
    """The views (reshape, transpose, slice) that hold all of their operand in its own order: the
    value numbering gives them their operand's number (hloflops.remat.views). They compute
    nothing and pass the value on, so they never pair (as bitcasts and copies)."""
    if not any(inst.opcode in VIEW_OPCODES for inst in comp.instructions):
        return set()
    number = dict(zip([inst.name for inst in comp.instructions], exacts))
    return {inst.name for inst in comp.instructions if inst.opcode in VIEW_OPCODES and inst.operands
            and number.get(inst.operands[0]) == number.get(inst.name)}


def _per_instruction(ops: list[_Op], named_ops: list[_Op], listed: list[_Op], remat: set[SiteKey],
                     clone_keys: set[Key]) -> RematIndex:
    """The index by instruction: an instruction of a callee called from several sites is one
    row of the accounting, so it is remat where it is recomputation at every site (before
    optimization nothing merges one site's copy and not another's: they agree)."""
    sites_of: dict[Key, list[bool]] = {}
    for op in ops:
        sites_of.setdefault(op.key[:2], []).append(op.key in remat)
    found = {key for key, flags in sites_of.items() if all(flags)} | clone_keys
    named = list(dict.fromkeys(op.key[:2] for op in named_ops))
    # `listed`: the named ops but older jax's backward work. One left without a twin at its own
    # site: a callee's recompute site that paired is no unpaired op where another site of the
    # callee (the forward's, reading the same jitted function) is model FLOPs.
    unpaired = dict.fromkeys(op.key[:2] for op in listed if op.key not in remat and op.key[:2] not in found)
    return RematIndex(frozenset(found), len(named), tuple(unpaired))


def _one_frame_unnamed(comps: list[Computation], numbers: Numbered, op_names: OpNames, clones: bool,
                       remat_named: bool) -> bool:
    """No op carries a remat name (`remat_named`: some op_name holds `remat`), none is a clone
    (`clones`: `_has_clones(comps)`) and all are numbered in one frame (an optimized module
    without loops, mixtral): only same-value classes can pair (`_by_value_only`)."""
    if any(c.name in numbers.shared for c in comps):  # a callee of several sites: pairs per site (`find_remat`)
        return False
    frames = {numbers.frame[c.name] for c in comps if c.name in numbers.exact}
    if len(frames) > 1:
        return False
    return not clones and not (remat_named and op_names.any_name_holds(REMAT_SCOPE, comps))


def _by_value_only(comps: list[Computation], numbers: Numbered, op_names: OpNames) -> RematIndex:
    """`find_remat` for `_one_frame_unnamed` modules, without an `_Op` per instruction (building
    them was a third of mixtral's remat pass): the same-value classes' marked ops, as
    `_same_value` picks them; no clones, no names, no other frame to pair with. Only the ops of
    classes with more than one member (a seventh of mixtral's) are looked at one by one."""
    kept: list[tuple[Computation, list[Instruction], list[Val]]] = []  # ops that can pair, their numbers
    for comp in comps:
        exact = numbers.exact.get(comp.name)
        if exact is None or comp.name in numbers.shared:
            continue
        # The numbering sets each instruction's number once, in order: its dict's values line up
        # with the instructions (a lookup by name per op was a fifth of this function).
        numbers_in_order = exact.values() if len(exact) == len(comp.instructions) \
            else [exact[i.name] for i in comp.instructions]
        moved = _whole_views(comp, list(numbers_in_order))
        can_pair = [_can_pair(inst, moved) for inst in comp.instructions]
        ops = list(compress(comp.instructions, can_pair))
        kept.append((comp, ops, list(compress(numbers_in_order, can_pair))))
    sizes = Counter(chain.from_iterable(exacts for _, _, exacts in kept))
    repeated = {number for number, size in sizes.items() if size > 1 and not isinstance(number, tuple)}
    classes: dict[Val, list[tuple[int, Computation, Instruction]]] = {}  # exact -> its marked ops, in order
    offset = 0  # an op's order: its position among all kept ops
    for comp, ops, exacts in kept:
        tainted = numbers.tainted[comp.name]
        for k in compress(range(len(ops)), map(repeated.__contains__, exacts)):
            if ops[k].name in tainted:
                classes.setdefault(exacts[k], []).append((offset + k, comp, ops[k]))
        offset += len(ops)

    def rank(op: tuple[int, Computation, Instruction]) -> tuple:  # `_same_value`'s first; no remat names: depth 0
        return (phase(op_names.of(op[1].name, op[2])) != "forward", op[0])

    remat: set[Key] = set()
    for exact, marked in classes.items():
        if len(marked) == sizes[exact]:  # no unmarked op computes it first: a marked one does
            marked.remove(min(marked, key=rank))
        remat.update([(comp.name, inst.name) for _, comp, inst in marked])
    return RematIndex(frozenset(remat), 0, ())


def _is_named(inst: Instruction, op_name: str, old: OldRematFrames | None = None) -> bool:
    return REMAT_SCOPE in op_name or (".remat" in inst.name and bool(XLA_REMAT_SUFFIX.search(inst.name))) or \
        (old is not None and op_name in old)


def _has_clones(comps: list[Computation]) -> bool:
    """Is any instruction named like an XLA `.remat` clone? (One search of all names joined:
    a third of the time of a test per instruction; the names read by a comprehension, whose
    attribute loads are specialised, not by `map` of an attrgetter.)"""
    return ".remat" in "\n".join([inst.name for comp in comps for inst in comp.instructions])



def _clones(comps: list[Computation]) -> set[Key]:
    """XLA's clones (fusions too): the original of the same name is the twin."""
    clones = [(comp.name, inst.name) for comp in comps for inst in comp.instructions if ".remat" in inst.name]
    if not clones:
        return set()
    names = {inst.name for comp in comps for inst in comp.instructions}
    found: set[Key] = set()
    for comp_name, name in clones:
        clone_of = XLA_REMAT_SUFFIX.sub("", name)
        if clone_of != name and clone_of in names:
            found.add((comp_name, name))
    return found


def _opcodes(module: Module) -> set[str]:
    """The opcodes the module uses, found once for the tests below (each scanned every
    instruction)."""
    return {inst.opcode for comp in module.computations for inst in comp.instructions}


def _classes(ops: list[_Op], exact: bool) -> dict[object, list[_Op]]:
    classes: dict[object, list[_Op]] = {}
    for op in ops:
        number = op.exact if exact else op.abstract
        if not isinstance(number, tuple):
            classes.setdefault(number, []).append(op)
    return classes


def _forward_copies(ops: list[_Op]) -> dict[Val, Counter]:
    """How many unmarked ops of each frame compute each abstract number (`_same_value`)."""
    out: dict[Val, Counter] = {}
    for op in ops:
        if not op.marked and not isinstance(op.abstract, tuple):
            out.setdefault(op.abstract, Counter())[op.frame] += 1
    return out


def _same_value(members: list[_Op], first_of_class: set[SiteKey], fused: set[str] = frozenset(),
                forward: int = 0, elsewhere: Mapping[Val, Counter] | None = None,
                named_forward: NamedForward | None = None) -> set[SiteKey]:
    """Ops that compute one value. The value is computed once by the program; every marked op
    beyond that first computation is recomputation. The first is an unmarked op if there is
    one; else (CSE merged the forward into its recompute, and the op kept the remat name) the
    least recomputed marked op, which is model FLOPs, unless the forward computes the value
    `forward` times elsewhere (`ForwardTwins`: the recompute read its inputs from other ops
    than the forward did, so the numbers differ). Unmarked duplicates (XLA's fusion copying
    a cheap op into several consumers, or hand-written modules) are not remat."""
    if len(members) < 2:
        return set()
    marked = [m for m in members if m.marked]
    if not marked:
        return set()
    unmarked = len(members) - len(marked) or forward
    forward_seen = unmarked > 0
    if not unmarked and elsewhere is not None and not isinstance(members[0].abstract, tuple):
        # Before optimization nothing merged a forward into its recompute: where every copy is
        # marked, the forward runs in another frame (a scan's forward loop body), and it computes
        # the value as often as the recompute may (seed 27: layer norm's `x - mean` twice;
        # seed 55: gelu's `x * x` once, the second copy in the backward being jvp's own).
        frames = {m.frame for m in members}
        unmarked = max((n for frame, n in elsewhere.get(members[0].abstract, Counter()).items()
                        if frame not in frames), default=0)
        if not unmarked and named_forward is not None:
            unmarked = named_forward.count(members)
        forward_seen = unmarked > 0
    if not unmarked:
        first = min(marked, key=lambda m: (remat_depth(m.op_name), phase(m.op_name) != "forward", m.order))
        first_of_class.add(first.key)
        marked = [m for m in marked if m is not first]
        unmarked = 1
    # A recompute runs the checkpoint's primal once: each value the forward computes k times is
    # recomputed at most k times under one name (one checkpoint's recompute). Copies beyond that
    # are the linearization's own (jvp computes `x * x` again for the derivative of `x ** 3`,
    # inside the recompute): the program without remat computes them too, in its forward. A
    # nested remat recomputes under another name (each level's checkpoint scope): each counts.
    # Without names (jax's lowered text) nested and jvp copies look alike: every marked copy
    # counts. So does every copy inside a fusion where the forward is not in sight (CSE merged
    # it, or it runs in another loop body): `fusion_copies` decides those by their fusion.
    # Where the forward is in sight, XLA copied the value into as many fusions as read it, in
    # the recompute as in the program without remat (whose forward holds the linearization's
    # fusions): the recompute adds as many copies as the forward has.
    found = {m.key for m in marked if not m.op_name or (m.key[0] in fused and not forward_seen)}
    by_name: dict[str, list[_Op]] = {}
    for m in marked:
        if m.key not in found:
            by_name.setdefault(m.op_name, []).append(m)
    for copies in by_name.values():
        found.update(m.key for m in sorted(copies, key=lambda m: m.order)[:unmarked])
    return found


def _by_signature(ops: list[_Op], named_ops: list[_Op], sizes: Counter, settled: set[SiteKey],
                  module: Module, own: set[SiteKey] = frozenset()
                  ) -> tuple[set[SiteKey], set[SiteKey], set[SiteKey]]:
    """Remat-named ops whose value matched nothing exactly. XLA simplifies a recompute and its
    forward independently (a reshape moved across an rsqrt, a fusion boundary elsewhere), so
    equal values do not always get equal numbers after optimization, and a recompute in a
    backward loop reads its inputs from another loop state than its forward. Such an op pairs
    with an op of the same signature (opcode, shapes, dimension numbers) whose op_name ends with
    the recompute's name inside its innermost checkpoint (`block_0/mlp/Dense_0/dot_general`)
    and that nothing else recomputes yet; each twin serves one recompute per remat depth and number
    of checkpoints around it (`_enclosing_checkpoints`), a forward whose value one level's
    recompute matched exactly (`_same_value`) the other levels still (`_levels_by_value`). A
    recompute CSE merged into its forward has no such twin left and stays unpaired.

    The twin must not be the backward's own work (an unnamed op of the backward pass), and in
    the recompute's own frame it must read the same inputs (`FrameInputs`: the same layer's
    weights), so that ops of different layers never pair. Returns the recomputes found, and
    those of them paired in their own frame without their inputs compared (a callee of several
    call sites): the pairing is weak (`RematIndex.weak`), and those paired with an op of another
    frame (a scan's backward loop body against its forward loop body). Both ways (the same
    inputs in one frame; another frame) it is the rule, checked on the generated programs
    (tests/remat/test_remat_generated.py)."""
    candidates = [op for op in named_ops if op.key not in settled and sizes[op.exact] == 1]
    if not candidates:
        return set(), set(), set()
    opcodes = {op.inst.opcode for op in candidates}
    shapes = {inst.name: shape_key(inst.shape) for _, inst in module.instructions()}
    # A forward op whose value a recompute matched exactly has served that recompute's level only:
    # nested remat recomputes a layer at two levels, and the inner level's copy may read its
    # inputs from other ops (its value numbered apart: base seeds 208, 249, an encoder-decoder's
    # decoder block recomputed by the stack's checkpoint and by its own). The forward is the twin
    # of that copy too, at the other level (`_enclosing_checkpoints`).
    served = _levels_by_value(ops, sizes, settled)
    pool: dict[tuple, list[_Op]] = {}
    for op in ops:
        if op.inst.opcode in opcodes and op.key not in settled and (sizes[op.exact] == 1 or op.exact in served):
            pool.setdefault(signature(op, shapes), []).append(op)
    # The twin of the shortest name first: the recompute's name inside its checkpoint names the op
    # as exactly as it can, and a longer name that ends the same way is another op's (a residual
    # add, `rematted_computation/add`, took the forward's `multi_head_attention_1/linear/add`
    # from the projection's bias add when both twins were in sight: more seeds 53, 54). A twin
    # that no recompute matched by value before one that serves a level already.
    for twins in pool.values():
        twins.sort(key=lambda twin: (sizes[twin.exact] > 1, len(model_components(twin.op_name))))
    # A fusion's outputs and unfused ops first: a copy inside a fusion is decided with its fusion
    # (`fusion_copies`), and must not take the twin of the op it copies.
    outputs = fused_outputs(module)
    # A longer name first, counting the wrappers (`jit(_var)`) that `ends_with` skips: layer norm's
    # `jit(_var)/div` would otherwise lose its twin to a shorter `layer_norm/div` of jvp's own.
    candidates.sort(key=lambda op: (op.key[0] in outputs and op.inst.name not in outputs[op.key[0]],
                                    -len(inner_tail(op.op_name)), -len(_raw_tail(op.op_name)), op.order))
    inputs = FrameInputs(module)
    entry = module.entry_name
    used: set[tuple[SiteKey, tuple[int, int]]] = {
        (op.key, level) for op in ops if op.exact in served for level in served[op.exact]}
    found: set[SiteKey] = set()
    weak: set[SiteKey] = set()
    across: set[SiteKey] = set()  # paired with an op of another frame
    beside: list[_Op] = []  # paired in their own frame after optimization
    for op in candidates:
        if any((op.key[0], name, op.key[2]) in own for name in op.inst.operands):
            continue  # reads the linearization's own copy: the linearization's work too
        # without a name, named by its inputs (`inherit_names`): one checkpoint deep
        tail, depth = inner_tail(op.op_name), 1 if op.inherited else remat_depth(op.op_name)
        level = _level(op)
        for twin in pool.get(signature(op, shapes), ()):
            if remat_depth(twin.op_name) >= depth or (twin.key, level) in used:
                continue
            if twin.op_name and not ends_with(twin.op_name, tail):
                continue
            if not twin.named and phase(twin.op_name) == "backward":  # the backward's own work is no forward twin
                continue
            same_frame = twin.frame == op.frame
            if not same_frame and twin.frame == entry and op.frame != entry and len(tail) < 2:
                # A loop body's recompute pairs with an op outside every loop (a weight's cast
                # hoisted out of the forward scan) only where its name inside the checkpoint names
                # a part of the model: a bare `mul` would take the loss's multiply (seeds 27, 55:
                # jvp's own multiplies of gelu and layer norm in the backward loop).
                continue
            if same_frame and not module.is_scheduled and op.abstract != twin.abstract and \
                    op.inst.opcode not in ("dot", "convolution"):
                # Before optimization nothing rewrote either copy: in one frame an elementwise twin
                # computes the same from inputs of the same shapes (equal abstract numbers); else
                # it is the linearization's own work (a derivative's coefficient), which reads the
                # same inputs as the forward's ops. A recompute's dot is always the primal's (the
                # recompute may read a saved stack's slice where the forward read its carry).
                continue
            if same_frame and not same_inputs(inputs, op, twin):  # another layer's op
                continue
            used.add((twin.key, level))
            found.add(op.key)
            if same_frame and (inputs.of(*op.key[:2]) is None or inputs.of(*twin.key[:2]) is None):
                weak.add(op.key)  # the inputs could not be compared
            elif same_frame and module.is_scheduled:
                beside.append(op)
            elif not same_frame:
                across.add(op.key)
            break
    # A recompute computes what the forward does, from what the forward computes: one that reads a
    # marked op paired with nothing, in its own frame, may be the linearization's own work instead
    # (softmax's `1 / (s * s)`, named in the recompute, took the forward's `1 / s` where CSE merged
    # that recompute away: more seed 119). Its pairing is weak.
    marked = {op.key: op for op in ops if op.marked}
    for op in beside:
        if any(key in marked and key not in found and key not in settled
               for key in ((op.key[0], name, op.key[2]) for name in op.inst.operands)):
            weak.add(op.key)
    return found, weak, across


def _level(op: _Op) -> tuple[int, int]:
    """A recompute's level (`_by_signature`): its remat depth (one for an op named by its inputs,
    `inherit_names`) and the checkpoints around its innermost `rematted_computation`."""
    return (1 if op.inherited else remat_depth(op.op_name), _enclosing_checkpoints(op.op_name))


def _levels_by_value(ops: list[_Op], sizes: Counter, settled: set[SiteKey]) -> dict[Val, set[tuple[int, int]]]:
    """The values an unmarked op computes whose remat-named copies all paired by value
    (`_same_value`), with the levels those copies recompute at: the unmarked op, the forward, can
    still be the twin of a recompute at another level whose value was numbered apart."""
    unmarked: set[Val] = set()
    levels: dict[Val, set[tuple[int, int]]] = {}
    loose: set[Val] = set()  # a marked copy left unpaired: the class is not settled by value
    for op in ops:
        if sizes[op.exact] < 2 or isinstance(op.exact, tuple):
            continue
        if not op.marked:
            unmarked.add(op.exact)
        elif op.named and op.key in settled:
            levels.setdefault(op.exact, set()).add(_level(op))
        else:
            loose.add(op.exact)
    return {number: found for number, found in levels.items() if number in unmarked and number not in loose}


def _enclosing_checkpoints(op_name: str) -> int:
    """How many checkpoints enclose a recompute's innermost `rematted_computation`. Nested remat
    recomputes an inner layer twice, and jax names only one of the two recomputes a
    `rematted_computation` each: the outer checkpoint's recompute of the layer
    (`.../checkpoint/rematted_computation/stack/block_0/Conv_0/...`) and the inner checkpoint's
    recompute inside the outer one's backward (`.../checkpoint/stack/checkpoint/
    rematted_computation/block_0/Conv_0/...`, TPU draw 16). Both are one remat deep, and both
    run: the forward twin serves each."""
    parts = op_name.split("/")
    last = max((i for i, part in enumerate(parts) if part == REMAT_SCOPE), default=0)
    return sum(part == "checkpoint" for part in parts[:last])


def _raw_tail(op_name: str) -> list[str]:
    """A recompute's name inside its checkpoint, wrappers kept (`layer_norm/jit(_var)/div`)."""
    return split_components(op_name.rpartition(REMAT_SCOPE)[2])


def _across_frames(ops: list[_Op], sizes: Counter, settled: set[SiteKey], remat_named: bool) -> set[SiteKey]:
    """Ops marked only by an optimization barrier (modules without names: jax's lowered text)
    left without a same-value twin in their own frame: a recompute in a loop body pairs with an
    unmarked op of another frame (the forward loop's body) that applies the same computation to
    inputs of the same shapes (equal abstract number). Before optimization nothing has
    rewritten either of them, so the structure is the same. Where jax named the recompute, an op
    it named otherwise is not one, barrier or not: the gradient of a checkpointed block reads the
    cotangent through the same barrier (a conv's bias gradient under `nn.scan(nn.remat)` paired
    with the stem's bias gradient, whose reduce has the same shapes)."""
    if len({op.frame for op in ops}) < 2:  # a twin must lie in another frame than its recompute
        return set()
    if not any(op.marked and not op.named and op.key not in settled for op in ops):
        return set()
    # The frames each abstract number of an unmarked op is computed in.
    frames_of: dict[object, set[str]] = {}
    for number, members in _classes([op for op in ops if not op.marked], exact=False).items():
        frames_of[number] = {t.frame for t in members}
    found: set[SiteKey] = set()
    for op in ops:
        if op.named or not op.marked or op.key in settled or sizes[op.exact] > 1 or (remat_named and op.op_name):
            continue
        number = op.abstract
        if isinstance(number, tuple):
            continue
        frames = frames_of.get(number)
        if frames and (len(frames) > 1 or op.frame not in frames):
            found.add(op.key)
    return found


def remat_fusion_bodies(module: Module, index: RematIndex) -> Mapping[str, bool]:
    """Fused computations called by an XLA `.remat` clone of a fusion: everything in them is
    recomputation too (their instructions keep their original names)."""
    result: dict[str, bool] = {}
    if not any(".remat" in name for _, name in index.remat):  # no clone is remat: no need to look
        return result
    for comp, inst in module.instructions():
        if inst.opcode == "fusion" and XLA_REMAT_SUFFIX.search(inst.name) and (comp.name, inst.name) in index:
            for callee in inst.called("fusion"):
                result[callee] = True
    return result
