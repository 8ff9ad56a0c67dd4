"""Which instructions are real recomputation: pairing each remat-marked op with an op that
computes the same value (see analysis/remat/__init__.py for the rules and why)."""

from __future__ import annotations

from collections import Counter
from itertools import chain, compress, count
from typing import Iterable, Mapping

from hloflops.remat.names import (
    REMAT_SCOPE, XLA_REMAT_SUFFIX, OldRematFrames, OpNames, old_remat_frames, remat_depth,
    site_names,
)
from hloflops.remat.across_loops import resting_on_fusion
from hloflops.remat.forward_twins import ForwardTwins, NamedForward, in_other_frames
from hloflops.remat.gradient_fusion_counts import counted_in_gradient_fusions
from hloflops.remat.marks import (
    casts_in_checkpoint_transpose, constants_in_checkpoint_transpose, folded_without_barrier, inherit_names,
    named_by_users, recomputes_named_in_transpose,
)
from hloflops.remat.collectives import collectives_of_recomputes, offsets_of_recomputed_collectives
from hloflops.remat.fusion_copies import fused_outputs, fusion_copies
from hloflops.remat.narrowed_forward_widens import narrowed_forward_widens
from hloflops.remat.by_platform import Decided, float_normalization_rules, tpu_rules
from hloflops.remat.stored_by_the_recompute import stored_by_the_recompute
from hloflops.remat.rebuilt_in_gradient_matmuls import rebuilt_in_gradient_matmuls
from hloflops.remat.recompute_epilogues import recompute_epilogues
from hloflops.remat.stored_forwards import StoredForwards
from hloflops.remat.view_copies import view_copies
from hloflops.remat.natural_layouts import natural_layouts
from hloflops.remat.saved_copies import saved_by_the_twin, weight_gradient_copies
from hloflops.remat.twin_residual_copies import unsplit_residual_copies
from hloflops.remat.twin_saves import copied_into_twin_saves
from hloflops.remat.stored_scales import stored_scale_copies
from hloflops.remat.stored_selects import stored_select_copies
from hloflops.remat.stored_gradient_chains import stored_chain_copies
from hloflops.remat.host_stacked_activations import host_stacked_activation_narrows, narrow_elements
from hloflops.remat.offloaded_sum_narrows import offloaded_source_narrows, offloaded_sum_narrows, stored_sum_narrows
from hloflops.remat.stored_twin_copies import stacked_residual_round_trips
from hloflops.remat.wide_residual_trips import wide_residual_trips
from hloflops.remat.rounded_operand_narrows import rounded_operand_narrows
from hloflops.remat.rebuilt_concatenations import rebuilt_concatenations
from hloflops.remat.rebuilt_activation_chains import rebuilt_activation_chains
from hloflops.remat.reader_shape_narrows import reader_shape_narrows
from hloflops.remat.op_kinds import is_identity_rounding
from hloflops.remat.rounding import copied_into_saves, widened_roundings
from hloflops.remat.unmarked_saves import copied_into_unmarked_saves
from hloflops.remat.normalization import unsure_normalization_widens
from hloflops.cost.tpu import is_tpu_module
from hloflops.remat.shared_reciprocals import shared_reciprocals
from hloflops.remat.unsunk_broadcasts import unsunk_broadcasts
from hloflops.remat.unstored_forward import unstored_forward_copies
from hloflops.remat.matvec_multiplies import with_matvec_multiplies
from hloflops.remat.stored_preactivations import stored_preactivation_trips
from hloflops.remat.weight_gradient_forms import weight_gradient_forms
from hloflops.remat.natural_convolution_forms import natural_convolution_forms
from hloflops.remat.conv_operand_narrows import weak_operand_narrows
from hloflops.remat.windowed_gradient_sums import windowed_gradient_sums
from hloflops.remat.windowed_matvec_loops import windowed_product_shares
from hloflops.remat.tpu_twin_hinges import add_tpu_twin_hinges
from hloflops.remat.windowed_forward_matvecs import with_windowed_forward_matvecs
from hloflops.remat.bias_gradient_narrows import bias_gradient_narrows
from hloflops.remat.op_kinds import DUPLICATED, MATMUL_OPCODES, is_memory_placement
from hloflops.remat.values import Numbered, Val, ValueNumbers, numbered
from hloflops.remat.views import VIEW_OPCODES
from hloflops.scopes import phase
from hloparse.ir import CallRole, Computation, Instruction, Module
from hloflops.remat.sites import Key, SiteKey, SiteOp, by_number
from hloflops.remat.index import RematIndex
from hloflops.remat.by_signature import across_frames, by_signature, linearization_only
from hloflops.remat.peeled_iterations import peeled_iteration_drops
from hloflops.remat.unrolled_iterations import unrolled_iteration_drops
from hloflops.remat.unit_dimension_forwards import squeezed_forward_values
from hloflops.remat.unstored_probabilities import unstored_probability_copies
from hloflops.remat.twin_packed_masks import twin_packed_mask_copies
from hloflops.remat.fused_residual_stacks import fused_residual_stacks
from hloflops.remat.xla_clones import has_xla_clones, xla_clones
from hloflops.remat.collective_fusion_copies import collective_fusion_copies
from hloflops.remat.stored_forward_copies import stored_forward_copies
from hloflops.remat.copied_gradient_chains import copied_gradient_chains


# Instructions that hand on a value computed elsewhere (or hold no computation of their own):
# they never pair, so a fusion and its root, or a copy and its operand, are not twins. Nor does
# a custom-call that moves a value between memories (`is_memory_placement`): the recompute's
# move back to the device computes nothing again.
PASS_THROUGH = frozenset({"parameter", "fusion", "call", "tuple", "get-tuple-element", "copy",
                          "opt-barrier", "while", "conditional", "constant", "bitcast",
                          "async-start", "async-update", "async-done"})


def find_remat(module: Module, computations: Iterable[Computation] | None = None,
               op_names: OpNames | None = None, values: ValueNumbers | None = None) -> RematIndex:
    comps = list(computations) if computations is not None else list(module.computations)
    op_names = op_names or OpNames(module)
    clones = has_xla_clones(comps)
    # One look through the names: jax's scope and older jax's frame both hold `remat`. Most
    # modules have neither, and this look is most of their remat pass.
    remat_named = op_names.any_name_holds("remat", comps)
    optimized_named = module.is_scheduled and remat_named  # what most rules after optimization ask first
    old = old_remat_frames(op_names, comps) if remat_named else None  # older jax's `remat` frame
    if values is None:
        opcodes = _opcodes(module)
        # Nothing can be marked without a remat name, a `.remat` clone or an optimization barrier
        # (a clone outside `comps` marks none of theirs): nothing is remat, and the value
        # numbering, the costliest part of the pass, is not needed.
        if not (remat_named or clones or "opt-barrier" in opcodes):
            return RematIndex(frozenset(), 0, ())  # what the pairing below finds when nothing is marked
        # Abstract numbers are read only across frames (`across_frames`): not needed without loops.
        numbers = numbered(module, "while" in opcodes)
    else:
        numbers = Numbered.of(module, values)
    if old is None and _one_frame_unnamed(comps, numbers, op_names, clones, remat_named):
        return _by_value_only(comps, numbers, op_names)
    ops: list[SiteOp] = []
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
            ops += [SiteOp((comp_name, inst.name, site), inst, op_name, named, named or taint, next(order), exact,
                        abstract, frame)
                    for inst, op_name, (exact, abstract, taint) in zip(comp.instructions, names, comp_numbers)
                    if _can_pair(inst, moved)
                    for named in (_is_named(inst, op_name, old),)]

    if remat_named:
        inherit_names(module, ops, op_names)
        recomputes_named_in_transpose(module, ops, op_names)
    clone_keys = xla_clones(comps) if clones else set()
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
    classes = list(by_number([op for op in ops if sizes[op.exact] > 1], exact=True).values())
    all_marked = [members for members in classes if all(m.marked for m in members)]
    twins = ForwardTwins(module, ops) if optimized_named and all_marked else None
    forward_of = twins.counts(all_marked) if twins is not None else {}
    counted_across: set[SiteKey] = set()  # copies counted against a forward in another loop body
    counted_here: set[SiteKey] = set()  # and in the class's own frame (gradient_fusion_counts)
    # After optimization, a value the forward computes once and stores: its recompute copies all
    # run because of remat (hloflops.remat.stored_forwards), beyond `_same_value`'s cap. Not TPU's
    # fusion, which copies a producer into its readers' fusions even where one of them stores it.
    stored = StoredForwards(module, ops) if optimized_named and not is_tpu_module(module) \
        else None
    stored_copies: set[SiteKey] = set()
    for members in classes:
        forward = forward_of.get(id(members), 0)
        found = _same_value(members, first_of_class, fused, forward, elsewhere, named_forward)
        extra = stored.copies(members) if stored is not None else set()
        if extra:  # those copies, in place of `_same_value`'s count under their name (each level's)
            names = {m.op_name for m in members if m.key in extra}
            found = extra | {m.key for m in members if m.key in found and (not m.op_name or m.op_name not in names)}
            stored_copies |= extra
        remat |= found
        if forward or not all(m.marked for m in members):
            by_value.update(m.key for m in members if m.marked and m.op_name)
        if forward and twins is not None and in_other_frames(twins, members):
            counted_across |= found
        elif forward:
            counted_here |= found
    by_class = set(remat)  # the copies counted by value, against their forward
    certain = first_of_class | {op.key for op in ops if op.named and sizes[op.exact] > 1}  # decided by value
    named_ops = [op for op in ops if op.named]
    weak: set[SiteKey] = set()  # paired by signature in the recompute's own frame
    twin_copies: dict[SiteKey, int] = {}  # values the program without remat computes more often
    select_stores: dict[SiteKey, int] = {}  # of them, a lookup select's sure copies (stored_selects)
    twin_narrows: dict[SiteKey, int] = {}  # converts of a value the program without remat may run
    chain_copies = stored_chain_copies(module, ops) if optimized_named else {}
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
        paired, weak, across = by_signature(ops, named_ops, sizes, remat | first_of_class, module, own)
        remat |= paired
    across |= across_frames(ops, sizes, remat | first_of_class, remat_named)
    remat |= across
    # Equal values, signatures, the same computation in another loop; but after optimization a
    # cheap copy paired with its forward in another loop body may stand for a copy the program
    # without remat makes to save the value (hloflops.remat.across_loops): it rests on fusion.
    # So may the copies of a class counted against forward copies in another loop body
    # (`ForwardTwins`): how many of them run because of remat is how XLA fused both programs.
    paired_by_value = remat - resting_on_fusion(module, ops, across, remat, DUPLICATED, counted_across - across)
    # Such a count by name, of a copy in a gradient fusion the twin has too: in the range
    # (hloflops.remat.gradient_fusion_counts).
    paired_by_value -= counted_in_gradient_fusions(ops, counted_here - across, fused_outputs(module))
    # The linearization's own work jax named in the recompute (softmax's `1 / (s * s)`): a fusion
    # of it is the program without remat's too, and so are the copies in it.
    own = linearization_only(ops, remat | first_of_class) if optimized_named else set()
    recomputes = set(remat)  # paired with a forward value, before the fusion rules
    # A first copy kept as model FLOPs whose forward is a unit dimension apart is no linearization
    # coefficient (hloflops.remat.unit_dimension_forwards).
    squeezed = squeezed_forward_values(module, ops, first_of_class) if optimized_named else set()
    remat, copies, stand_ins, moved, gradient_side = fusion_copies(module, ops, remat, first_of_class, sizes,
                                                                   by_value, own, squeezed)
    paired_by_value |= moved  # a count by value passed on to a sibling copy
    if optimized_named and is_tpu_module(module):  # hloflops.remat.rebuilt_in_gradient_matmuls
        rebuilt = rebuilt_in_gradient_matmuls(module, ops, fused_outputs(module), remat, first_of_class)
        remat, certain = remat - rebuilt, certain | rebuilt
    if optimized_named:
        # A paired cheap recompute reading a recomputed matmul in a gradient fusion, which rule 4
        # took for a copy: the program without remat stores it from its forward matmul's fusion
        # (hloflops.remat.recompute_epilogues).
        epilogues = recompute_epilogues(module, ops, fused_outputs(module), remat, recomputes - remat - gradient_side)
        remat |= epilogues
        paired_by_value -= epilogues
    remat |= stored_copies  # in gradient fusions too: the program without remat reads the stored value
    if optimized_named and is_tpu_module(module):
        # A value only the recompute stores: the forward's extra copies of it in its readers'
        # fusions run because of remat (hloflops.remat.unstored_forward). How many copies the
        # forward without remat makes rests on its fusion: `loose` below, in the range only.
        remat |= unstored_forward_copies(module, ops, classes, remat)
    certain |= copies
    remat, laid_out = view_copies(module, ops, remat)
    settled_widens: set[SiteKey] = set()  # widens hloflops.remat.widen_counts settled either way
    certain -= laid_out  # model FLOPs on how XLA fused the program without remat: unsure
    remat, materialized = natural_layouts(module, ops, remat)  # and a layout the forward leaves out
    certain -= materialized
    if remat_named:
        remat, saved = saved_by_the_twin(module, ops, remat, op_names)
        certain |= saved
        # A forward copy in a fusion that stands in for the twin's saving or relayout copy is settled.
        settled = {(key[0], key[2]) for key in saved}
        stand_ins = {key for key in stand_ins if (key[0], key[2]) not in settled}
        if module.is_scheduled:
            # A value the recompute stores that the forward only copies: the forward's copies are
            # remat, the recompute's chain the program without remat's forward
            # (hloflops.remat.stored_by_the_recompute).
            added, stored = stored_by_the_recompute(module, ops, remat, fused_outputs(module))
            remat = (remat | added) - stored
            certain |= stored
        # A recomputed cheap value on the chains of the residuals the program without remat saves:
        # as many copies run because of remat as the forward and gradient fusions hold beyond
        # those the saving fusions make, the rest model FLOPs, and a count taken back from a
        # gradient fusion's copy moves to a recompute's (hloflops.remat.twin_saves): settled.
        remat, twin_saves, moved = copied_into_twin_saves(module, ops, remat, by_class, op_names, saved,
                                                          weight_gradient_copies(module, ops, op_names),
                                                          twin_copies)
        certain |= twin_saves
        paired_by_value |= moved
        stand_ins -= twin_saves
        if module.is_scheduled:  # a cheap scale stored once, its readers' copies in the twin (range only)
            stored_scale_copies(module, ops, remat, twin_copies)
            stored_select_copies(module, ops, remat, op_names, twin_copies, select_stores)  # a select (stored_selects)
            if is_tpu_module(module):  # the twin's extra copies (offloaded_sum_narrows, twin_residual_copies)
                for key, n in offloaded_sum_narrows(module, ops).items():
                    twin_copies[key] = twin_copies.get(key, 0) + n
                for key, n in offloaded_source_narrows(module, ops).items():  # and of an offloaded `h`
                    twin_copies[key] = twin_copies.get(key, 0) + n
                for key, n in stored_sum_narrows(module, ops).items():  # and of `h` a loop's stack keeps
                    twin_copies[key] = twin_copies.get(key, 0) + n
                twin_narrows = host_stacked_activation_narrows(module, ops)  # and of `act(h)`, no bias
                for key, n in bias_gradient_narrows(module, ops).items():  # and of a gradient only matmuls read
                    twin_narrows[key] = max(twin_narrows.get(key, 0), n)
                unsplit_residual_copies(module, ops, remat, twin_copies)
                for widen in stored_preactivation_trips(module, ops, remat).values():  # stored_preactivations
                    twin_copies[widen] = twin_copies.get(widen, 0) + 1
        if module.is_scheduled:
            # The rules one backend's compiler needs: TPU's backward loops and sharded weights, CPU's
            # float normalization (hloflops.remat.by_platform).
            decided = Decided(remat, certain, paired_by_value, stand_ins)
            if is_tpu_module(module):
                tpu_rules(module, ops, decided, recomputes)
                wide_residual_trips(module, ops, decided.remat, twin_copies)  # hloflops.remat.wide_residual_trips
                # a recomputed softmax `e / s` the forward does not store: the twin may copy it (unstored_probabilities)
                for key, n in unstored_probability_copies(module, ops, decided.remat).items():
                    twin_copies[key] = twin_copies.get(key, 0) + n
                # a recomputed relu mask the twin may pack and unpack (twin_packed_masks)
                for key, n in twin_packed_mask_copies(module, ops).items():
                    twin_copies[key] = twin_copies.get(key, 0) + n
                # hloflops.remat.rounded_operand_narrows: weak, and a narrow the twin may run more
                decided.paired_by_value -= rounded_operand_narrows(module, ops, decided.remat, twin_copies)
            else:
                settled_widens = float_normalization_rules(module, ops, decided)
            remat, certain, paired_by_value, stand_ins = (decided.remat, decided.certain, decided.paired_by_value,
                                                          decided.stand_ins)
    remat |= {op.key for op in ops if is_identity_rounding(op.inst)}  # a policy's saved residual
    # Forward ops copied into the fusion saving a policy's residual: remat where only the recompute
    # reads the stored value, else unsure (hloflops.remat.rounding).
    copied_to_save, saved_for_recompute = copied_into_saves(module, ops, remat) \
        if module.is_scheduled else (set(), set())
    if optimized_named:  # an offload policy's residual, unmarked (hloflops.remat.unmarked_saves)
        saved_for_recompute |= copied_into_unmarked_saves(module, ops, remat)
    remat |= saved_for_recompute
    paired_by_value |= saved_for_recompute
    # The round trips into f32 feeding a saved residual's rounding compute no recompute: the
    # fusion ending in one (a library matmul's) does not compute a recompute for what it widens.
    trips = widened_roundings(module, ((op.key, op.inst) for op in ops)) if remat_named else set()
    remat |= trips
    if not module.is_scheduled:
        remat |= folded_without_barrier(module, ops)
    elif remat_named:
        remat |= constants_in_checkpoint_transpose(module, ops)
    # A sharded recompute's collectives (its partial sums' all-reduce): recompute where what they
    # reduce is (hloflops.remat.collectives), as sure as that; a variadic one only partly: the share
    # of its elements that its recomputed operands hold.
    collectives, sure_collectives, shared_collectives = collectives_of_recomputes(
        module, ((op.key, op.inst, op.marked) for op in ops), remat, paired_by_value - weak)
    remat |= collectives | set(shared_collectives)
    if module.is_scheduled:
        fused = fused_outputs(module)
        remat |= offsets_of_recomputed_collectives(((op.key, op.inst) for op in ops if op.key[0] in fused), remat)
    paired_by_value |= sure_collectives
    if optimized_named:
        # A recomputed reciprocal the backward's division by the same value shares (XLA's CSE kept
        # one `1 / s` for both): model FLOPs, unsure (hloflops.remat.shared_reciprocals).
        shared = shared_reciprocals(module, ops, remat, across, op_names)
        remat -= shared
        certain -= shared  # unsure, however its value was paired
    # Older jax's frame holds the checkpoint's backward ops too: without a twin such an op is
    # backward work, not a recompute CSE merged, and is not listed as one.
    listed = [op for op in named_ops if not op.inherited and (old is None or op.op_name not in old)]
    index = _per_instruction(ops, named_ops, listed, remat, clone_keys)
    if optimized_named and is_tpu_module(module):  # the twin may rebuild it (rebuilt_activation_chains)
        paired_by_value -= rebuilt_activation_chains(module, ops, remat, paired_by_value)
    if optimized_named and is_tpu_module(module):  # a narrow per reader shape the twin may run (reader_shape_narrows)
        paired_by_value -= reader_shape_narrows(module, ops, remat, paired_by_value)
    # After optimization, what the fusion rules (copies, saved copies, roundings) decide for a cheap
    # op rests on how XLA fused the two programs, not on an equal value: the range covers it.
    loose = {op.key for op in ops if op.inst.opcode not in MATMUL_OPCODES} & (remat - paired_by_value) \
        if module.is_scheduled else set()
    if optimized_named:  # a counted hinge's narrow for a convolution: a hinge with it (conv_operand_narrows)
        loose |= weak_operand_narrows(module, ops, loose | weak) & remat
    # Before optimization (a module XLA has not scheduled) no CSE has merged a recompute into its
    # forward: a remat-named op without a twin is the linearization's own work, not a recompute.
    # And a float normalization's widen inside a recompute's fusion that no rule counted: how many
    # the program without remat runs follows how XLA fused its forward (hloflops.remat.normalization).
    # Not the widens hloflops.remat.widen_counts settled, nor beside them only (a forward fusion).
    unsure_widens = unsure_normalization_widens(module, ops, remat - trips - settled_widens) - settled_widens \
        if module.is_scheduled else set()
    unsure = {op.key[:2] for op in listed if op.key not in remat and op.key not in certain} \
        | {key[:2] for key in stand_ins | unsure_widens} \
        | {key[:2] for key in copied_to_save} \
        if module.is_scheduled else set()
    if optimized_named and is_tpu_module(module):  # hloflops.remat.rebuilt_concatenations
        unsure |= rebuilt_concatenations(module, ops)
    if optimized_named:  # a recompute's copies in collective fusions: hinges (collective_fusion_copies)
        unsure |= {key[:2] for key in collective_fusion_copies(module, ops) if key not in remat}
    if optimized_named and is_tpu_module(module):  # and of a value the forward stores (stored_forward_copies)
        unsure |= {key[:2] for key in stored_forward_copies(module, ops) if key not in remat}
        unsure |= {key[:2] for key in copied_gradient_chains(module, ops, remat)}  # a chain off a rebuilt matmul
    if optimized_named and is_tpu_module(module):  # a widen the twin may not run (narrowed_forward_widens)
        unsure |= narrowed_forward_widens(module)
    # An elementwise op XLA could not move below a broadcast, the barrier of a checkpoint's
    # backward between them: the FLOPs it runs on the broadcast's copies are remat's.
    partial = {key: share for key, share in unsunk_broadcasts(comps).items() if key not in index.remat} \
        if optimized_named and not is_tpu_module(module) else {}
    partial.update((key[:2], share) for key, share in shared_collectives.items() if key[:2] in index.remat)
    if optimized_named and is_tpu_module(module):  # a remat-only window loop's shorter reduces (windowed_matvec_loops)
        partial.update(windowed_product_shares(module))
    stacks = stacked_residual_round_trips(module, ops, op_names) if remat_named else {}  # key -> (sure, more, forward)
    if optimized_named and is_tpu_module(module):  # a scan's twin stacks residuals fused here (fused_residual_stacks)
        stacks.update(fused_residual_stacks(module, op_names, {key[:2] for key in remat}))
    hinged = {key[:2]: n for key, n in twin_copies.items()}
    cotangent_stores: dict[Key, int] = {}  # hloflops.remat.matmul_loss_cotangents
    if optimized_named and is_tpu_module(module):  # copies the twin may make (hloflops.remat.tpu_twin_hinges)
        cotangent_stores, cotangent_narrows = add_tpu_twin_hinges(
            module, ops, remat, loose | weak, index.remat, fused_outputs(module), hinged, twin_narrows)
        unsure |= cotangent_narrows
    found = RematIndex(index.remat | frozenset(partial), index.remat_named, index.merged,
                      frozenset(key[:2] for key in (weak - copies) | loose if key in remat) & index.remat,
                      # a value the program without remat copies more often than this one: no copy of
                      # it here can be remat (hloflops.remat.stored_twin_copies)
                      frozenset(unsure) - index.remat - frozenset(partial) - {key[:2] for key in twin_copies}
                      - set(stacks),
                      partial, _with_stacks(_with_stacks(hinged, {
                          key[:2]: n for key, n in chain_copies.items()}),  # hloflops.remat.stored_gradient_chains
                                            {key: more for key, (_, more, _) in stacks.items() if more}),
                      {key: sure for key, (sure, _, _) in stacks.items()}
                      | {key[:2]: n for key, n in select_stores.items()}  # hloflops.remat.stored_selects
                      | cotangent_stores,  # hloflops.remat.matmul_loss_cotangents
                      twin_store_forward={key: n for key, (_, _, n) in stacks.items() if n},
                      twin_narrows=narrow_elements(module, twin_narrows),
                      twin_trips={**peeled_iteration_drops(module),
                                  # a layer loop unrolled whole, its last copy pruned (unrolled_iterations)
                                  **(unrolled_iteration_drops(module) if is_tpu_module(module) else {})}
                      if optimized_named else {},
                      # the twin's form of a packed layer's weight gradient (weight_gradient_forms)
                      # and a natural convolution where this program packs that geometry (natural_convolution_forms)
                      twin_forms={**natural_convolution_forms(module), **weight_gradient_forms(module)}
                      if optimized_named else {},
                      # a windowed weight gradient's partial sums the twin may add (windowed_gradient_sums)
                      twin_sums=windowed_gradient_sums(module) if optimized_named else {})
    # A matvec's unnamed multiply shares its reduce's answer (hloflops.remat.matvec_multiplies).
    # And a recompute's matvec whose forward ran as a window loop (hloflops.remat.windowed_forward_matvecs).
    return with_matvec_multiplies(module, with_windowed_forward_matvecs(module, found)) \
        if optimized_named and is_tpu_module(module) else found


def _with_stacks(twin: dict[Key, int], stacks: Mapping[Key, int]) -> dict[Key, int]:
    """The twin's extra copies and its stacks' round trips (hloflops.remat.stored_twin_copies), summed."""
    for key, n in stacks.items():
        twin[key] = twin.get(key, 0) + n
    return twin


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


def _per_instruction(ops: list[SiteOp], named_ops: list[SiteOp], listed: list[SiteOp], remat: set[SiteKey],
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
    (`clones`: `has_xla_clones(comps)`) and all are numbered in one frame (an optimized module
    without loops, mixtral): only same-value classes can pair (`_by_value_only`)."""
    if any(c.name in numbers.shared for c in comps):  # a callee of several sites: pairs per site (`find_remat`)
        return False
    frames = {numbers.frame[c.name] for c in comps if c.name in numbers.exact}
    if len(frames) > 1:
        return False
    return not clones and not (remat_named and op_names.any_name_holds(REMAT_SCOPE, comps))


def _by_value_only(comps: list[Computation], numbers: Numbered, op_names: OpNames) -> RematIndex:
    """`find_remat` for `_one_frame_unnamed` modules, without an `SiteOp` per instruction (building
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


def _opcodes(module: Module) -> set[str]:
    """The opcodes the module uses, found once for the tests below (each scanned every
    instruction)."""
    return {inst.opcode for comp in module.computations for inst in comp.instructions}


def _forward_copies(ops: list[SiteOp]) -> dict[Val, Counter]:
    """How many unmarked ops of each frame compute each abstract number (`_same_value`), per call
    site: a callee called at several sites (an unrolled gradient accumulation's microbatches)
    computes the value once at each, and a class of equal values is one site's."""
    out: dict[Val, Counter] = {}
    for op in ops:
        if not op.marked and not isinstance(op.abstract, tuple):
            out.setdefault(op.abstract, Counter())[op.frame, op.key[2]] += 1
    return out


def _same_value(members: list[SiteOp], first_of_class: set[SiteKey], fused: set[str] = frozenset(),
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
        unmarked = max((n for (frame, _), n in elsewhere.get(members[0].abstract, Counter()).items()
                        if frame not in frames), default=0)
        # An abstract number is a signature of the inputs, not their value: the forward's layer
        # norm `x * x` and gelu's `x * x` of another [B, T, D] value share one. Where the forward's
        # copies under the recompute's own name are fewer, those are its copies of this value.
        named = named_forward.count(members) if named_forward is not None else 0
        unmarked = min(unmarked, named) if unmarked and named else unmarked or named
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
    by_name: dict[str, list[SiteOp]] = {}
    for m in marked:
        if m.key not in found:
            by_name.setdefault(m.op_name, []).append(m)
    # a copy holding the value with unit dimensions the others lack (a stack's `[1, ...]`) last
    common = Counter(m.inst.shape.dims for m in members).most_common(1)[0][0]
    for copies in by_name.values():
        found.update(m.key for m in sorted(copies, key=lambda m: (m.inst.shape.dims != common, m.order))[:unmarked])
    return found
