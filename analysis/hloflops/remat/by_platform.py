"""The remat rules one backend's compiler needs, after optimization.

TPU fuses a scan's backward loop body apart from its forward's, shards weights and gathers them,
and computes expensive recomputes in f32 between a widen and a narrow; CPU's float normalization
computes bf16 ops in f32, with widens and narrows XLA places fusion by fusion. Each rule here
moves ops between the sets `hloflops.remat.pairing.find_remat` builds (`Decided`); the modules
named in the comments say why each move is right.
"""

from __future__ import annotations

from dataclasses import dataclass

from hloflops.remat.activation_output_narrows import activation_output_narrows
from hloflops.remat.backward_loop_copies import backward_loop_copies, gradient_chain_copies
from hloflops.remat.coefficient_fusions import coefficient_fusions
from hloflops.remat.fusion_copies import backward_loop_bodies, fused_outputs
from hloflops.remat.host_read_recomputes import host_read_recomputes
from hloflops.remat.loop_invariant_packings import loop_invariant_packings
from hloflops.remat.nested_forward_narrows import nested_forward_narrows
from hloflops.remat.normalization import recompute_barrier_roundings
from hloflops.remat.conv_operand_narrows import conv_operand_narrows
from hloflops.remat.corrected_narrows import narrows_of_uncounted_ops
from hloflops.remat.packed_conv_inputs import packed_conv_inputs
from hloflops.remat.packed_layout_recomputes import packed_layout_recomputes
from hloflops.remat.packed_masks import packed_masks
from hloflops.remat.twin_packed_masks import shared_mask_packings
from hloflops.remat.offloaded_residuals import nested_offloaded_recomputes, offloaded_matmul_epilogues
from hloflops.remat.pinned_inputs import pinned_input_widens
from hloflops.remat.recompute_converts import relaid_recompute_converts
from hloflops.remat.stored_matmul_outputs import stored_matmul_output_converts
from hloflops.remat.regathered_narrows import repeated_shard_narrows
from hloflops.remat.regathered_loop_narrows import backward_loop_shard_narrows
from hloflops.remat.recompute_permute_narrows import recompute_permute_narrows
from hloflops.remat.regathered_forward_windows import regathered_forward_windows
from hloflops.remat.regathered_windowed_einsums import regathered_windowed_einsums
from hloflops.remat.saved_chain_widens import recompute_widens_hinge
from hloflops.remat.saved_residual_narrows import saved_residual_narrows
from hloflops.remat.saving_copy_narrows import narrows_of_saving_copies
from hloflops.remat.sites import SiteKey, SiteOp
from hloflops.remat.stored_cotangents import stored_cotangents
from hloflops.remat.stored_preactivations import stored_preactivation_trips
from hloflops.remat.tpu_folded_squares import tpu_folded_square_offsets
from hloflops.remat.twice_windowed_gathers import twice_windowed_gathers
from hloflops.remat.twin_residual_copies import split_residual_copies
from hloflops.remat.type_corrections import type_corrections, widens_of_uncounted_ops
from hloflops.remat.widen_counts import balanced_widens
from hloflops.remat.windowed_forward_recomputes import windowed_forward_recomputes
from hloflops.remat.windowed_matmuls import windowed_recomputes
from hloflops.remat.windowed_matvec_loops import windowed_matvec_loops
from hloparse.ir import Module


@dataclass
class Decided:
    """The split so far: what is remat, which of it (or of the model's) is settled, which remat
    ops were paired with a forward value (sure), and the forward copies that may stand for a
    copy the program without remat makes (unsure)."""
    remat: set[SiteKey]
    certain: set[SiteKey]
    paired_by_value: set[SiteKey]
    stand_ins: set[SiteKey]


def tpu_rules(module: Module, ops: list[SiteOp], decided: Decided, recomputes: set[SiteKey]) -> None:
    """TPU's rules, in order (each reads what the ones before it decided)."""
    d = decided
    paired = set(d.remat)  # what the pairing and the fusion rules counted, before TPU's rules
    # Copies in a backward loop body whose forward runs in another loop body: each recomputed
    # value's copies but those the program without remat's saving fusion makes, and the backward's
    # own copies of a value computed from a recompute, but one (hloflops.remat.backward_loop_copies).
    backward_loops = backward_loop_bodies(module, ops)
    if backward_loops:
        counted, sure, saving, model = backward_loop_copies(module, ops, fused_outputs(module), backward_loops)
        d.remat = (d.remat | counted) - saving - model
        d.certain |= counted | model
        d.paired_by_value |= sure
        d.stand_ins = (d.stand_ins - counted - model) | saving
        # The narrow of such a copy the saving fusion makes too takes its answer, as sure as it
        # (hloflops.remat.saving_copy_narrows).
        narrows = narrows_of_saving_copies(module, ops, d.remat, saving | model)
        d.remat -= set(narrows)
        d.paired_by_value -= set(narrows)
        d.certain |= {key for key, of in narrows.items() if of in model}
        d.stand_ins |= {key for key, of in narrows.items() if of in saving}
    # A gradient chain reading a recompute, copied into several fusions of the forward's own
    # frame: the copies beyond one may run because of remat (unsure).
    d.stand_ins |= gradient_chain_copies(module, ops, fused_outputs(module), backward_loops, recomputes) - d.remat
    # Through an offload policy's round trip to the host: a recompute nested in a backward matmul's
    # fusion as the forward nests its own is model FLOPs, and the bias adds of the saved matmul
    # output, whose sum the program without remat stores, are remat (hloflops.remat.offloaded_residuals).
    nested = nested_offloaded_recomputes(module, ops, d.remat, fused_outputs(module))
    epilogues = offloaded_matmul_epilogues(module, ops)
    d.remat = (d.remat - nested) | epilogues
    d.certain |= nested | epilogues
    d.stand_ins -= epilogues
    # The widen and narrow TPU wraps around an expensive recompute it computes in f32: the
    # recompute's own (hloflops.remat.type_corrections), as sure as it.
    corrections = type_corrections(module, ops, d.remat, backward_loops)
    d.remat |= set(corrections)
    d.certain |= set(corrections)
    d.paired_by_value |= {key for key, of in corrections.items() if of in d.paired_by_value}
    # A constant's widen whose readers in its fusion are all uncounted marked ops takes their answer.
    uncounted = widens_of_uncounted_ops(module, ops, d.remat)
    d.remat, d.stand_ins = d.remat - uncounted, d.stand_ins | uncounted
    # The program without remat saves tanh's `1 - t` narrowed, from a widened constant: two
    # converts offsetting the recompute's (hloflops.remat.saved_residual_narrows).
    narrows = saved_residual_narrows(module, ops, d.remat, backward_loops)
    d.remat -= narrows
    d.certain |= narrows
    # A cotangent the recompute's matmul fusion stores narrowed, which the program without remat
    # copies wide into each matmul reader (hloflops.remat.stored_cotangents).
    stored_narrows, given_back = stored_cotangents(module, ops, d.remat, backward_loops)
    d.remat = (d.remat | stored_narrows) - given_back
    d.certain |= stored_narrows | given_back
    # A square's coefficient `2 * x` the twin saves, which XLA folded away here: one recompute of
    # the square's size is model FLOPs (hloflops.remat.tpu_folded_squares).
    folded = tpu_folded_square_offsets(module, ops, d.remat)
    d.remat -= folded
    d.certain |= folded
    # The forward's narrow of an activation nested whole, matmul and all, in the next matmul's
    # fusion: the program without remat stores that matmul's output and reads it wide
    # (hloflops.remat.nested_forward_narrows; in the range).
    d.remat |= nested_forward_narrows(module, ops, d.remat)
    # Its single-read chain (tanh's), where the backward reads the activation's recompute wide: that
    # program stores the activation wide outside loops (hloflops.remat.activation_output_narrows; in the range).
    d.remat |= activation_output_narrows(module, ops, d.remat)
    # A weight shard narrowed again for the recompute's gather (hloflops.remat.regathered_narrows; unsure).
    d.remat |= repeated_shard_narrows(module, ops)
    # ... or in a backward loop body, a trip's slice of the stack (hloflops.remat.regathered_loop_narrows; unsure).
    d.remat |= backward_loop_shard_narrows(module, ops, backward_loops) - d.certain - d.paired_by_value
    # A value narrowed only for a recompute's windowed-einsum permutes (recompute_permute_narrows; unsure).
    d.remat |= recompute_permute_narrows(module, ops)
    # Unpaired recomputed matmuls whose twin the partitioner windowed, or that read a residual offloaded
    # to the host (hloflops.remat.windowed_matmuls, hloflops.remat.host_read_recomputes): sure.
    found = windowed_recomputes(module, ops, d.remat)
    found |= host_read_recomputes(module, ops, d.remat | found)
    # ... or whose forward the partitioner windowed in the recompute's own frame, the windows reading
    # the recompute's weight (hloflops.remat.windowed_forward_recomputes): sure.
    found |= windowed_forward_recomputes(module, ops, d.remat | found)
    d.remat, d.certain, d.paired_by_value = d.remat | found, d.certain | found, d.paired_by_value | found
    # A forward windowed einsum whose activation the backward regathers from a recompute: its
    # accumulating ops are remat, the weight's narrow for it unsure (hloflops.remat.regathered_windowed_einsums).
    windowed, narrowed_for_it = regathered_windowed_einsums(module, ops)
    d.remat, d.certain, d.stand_ins = d.remat | windowed, d.certain | windowed, d.stand_ins | narrowed_for_it
    # ... or regathers the saved activation itself in the loop's frame (hloflops.remat.regathered_forward_windows).
    windowed, narrowed_for_it = regathered_forward_windows(module, ops)
    d.remat, d.certain, d.stand_ins = d.remat | windowed, d.certain | windowed, d.stand_ins | narrowed_for_it
    # ... the same for a loop whose products XLA writes as multiply and reduce (hloflops.remat.windowed_matvec_loops).
    windowed, narrowed_for_it = windowed_matvec_loops(module, ops)
    d.remat, d.certain, d.stand_ins = d.remat | windowed, d.certain | windowed, d.stand_ins | narrowed_for_it
    # An activation window-gathered for its forward matmul and again for its weight gradient, which
    # the program without remat gathers once for both: the windows' concatenations, row selections
    # and partial sums are remat (hloflops.remat.twice_windowed_gathers).
    twice = twice_windowed_gathers(module, ops)
    d.remat, d.certain, d.stand_ins = d.remat | twice, d.certain | twice, d.stand_ins - twice
    d.paired_by_value |= twice
    # A recompute the forward computes only on a packed convolution's layout: a stand-in, not the
    # linearization's own (hloflops.remat.packed_layout_recomputes; before its narrow's rule below).
    packed_layout_recomputes(module, ops, d)
    # A conv input's `-inf` pad/max packing counts with its conv (hloflops.remat.packed_conv_inputs).
    packed_conv_inputs(module, ops, d)
    # ... but not a window of rows gathered twice (found above): the program without remat gathers
    # them once, whole, and concatenates nothing (hloflops.remat.twice_windowed_gathers; utpu 224).
    d.remat |= twice
    conv_operand_narrows(module, ops, d)  # its operand's narrow, as the op it narrows (conv_operand_narrows)
    # A recompute's packing of loop-invariant pieces in a backward loop body, which the program without
    # remat hoists out of its loops: remat, in the range (hloflops.remat.loop_invariant_packings).
    loop_invariant_packings(module, ops, d)
    # A recomputed pre-activation stored narrowed and widened back, as the program without remat's
    # forward stores it: remat, not sure (hloflops.remat.stored_preactivations).
    d.paired_by_value -= {key for pair in stored_preactivation_trips(module, ops, d.remat).items() for key in pair}
    # A recomputed mask bit-packed in a scan's backward loop body, and its unpacks: remat (packed_masks).
    packed_masks(module, ops, d)
    # Outside such a loop, its packing and unpacks: the program without remat packs its forward's
    # mask alike, model FLOPs (hloflops.remat.twin_packed_masks).
    shared_mask_packings(module, ops, d)
    # Float normalization's widens in a backward loop's recompute fusions: the program without remat
    # copies such widens into its saving fusions, so their count is the range's (saved_chain_widens).
    if backward_loops:
        d.paired_by_value -= recompute_widens_hinge(module, ops, d.remat, backward_loops)
    # A recompute of a residual the program without remat computes twice in its forward
    # (hloflops.remat.twin_residual_copies), or fused with its coefficient's gradient, which that
    # program computes in a fusion of its own (hloflops.remat.coefficient_fusions): model FLOPs.
    split = split_residual_copies(module, ops, d.remat) | coefficient_fusions(module, ops, d.remat)
    d.remat -= split
    d.certain |= split
    # The unnamed narrow of a type-corrected cheap op a rule above took out of remat takes the op's
    # answer (hloflops.remat.corrected_narrows), as sure as it.
    narrows = narrows_of_uncounted_ops(module, ops, d.remat, paired - d.remat)
    d.remat -= set(narrows)
    d.paired_by_value -= set(narrows)
    d.certain |= {key for key, of in narrows.items() if of in d.certain}
    # A matmul's biased output the recompute stores and the forward fuses on: the converts around
    # it but one widen are the program without remat's (hloflops.remat.stored_matmul_outputs); in
    # the range, resting on how XLA fused that program.
    stored_sums = stored_matmul_output_converts(module, ops, d.remat, backward_loops)
    d.remat, d.certain = d.remat - stored_sums, d.certain - stored_sums
    d.paired_by_value, d.stand_ins = d.paired_by_value - stored_sums, d.stand_ins | stored_sums


def float_normalization_rules(module: Module, ops: list[SiteOp], decided: Decided) -> set[SiteKey]:
    """CPU's rules for float normalization's converts. Returns the widens
    hloflops.remat.widen_counts settled either way."""
    d = decided
    # Widens in recompute fusions, as many per value as the forward's fusions widen it
    # (hloflops.remat.widen_counts; rests on fusion: not `paired_by_value`).
    d.remat, balanced, settled_widens = balanced_widens(module, ops, d.remat)
    d.certain |= balanced
    d.paired_by_value |= settled_widens & d.remat
    # A recompute's rounding named after a nested checkpoint's barrier follows the op it rounds
    # (hloflops.remat.normalization).
    barrier_roundings = recompute_barrier_roundings(module, ops, d.remat)
    d.remat |= barrier_roundings
    d.certain |= barrier_roundings
    # The backward's widens of a checkpoint input its barrier pinned narrow, which the program
    # without remat reads wide (hloflops.remat.pinned_inputs).
    pinned = pinned_input_widens(module, ops)
    d.remat |= pinned
    d.certain |= pinned
    # A recompute relaid out for backward matmuls: its converts but the one widen standing for the
    # program without remat's (hloflops.remat.recompute_converts).
    relaid, stand_ins_of_stored = relaid_recompute_converts(module, ops, d.remat)
    d.remat = (d.remat | relaid) - stand_ins_of_stored
    d.certain |= relaid | stand_ins_of_stored
    return settled_widens
