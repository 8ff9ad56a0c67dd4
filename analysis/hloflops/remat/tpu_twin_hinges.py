"""The copies a TPU twin may make that this program does not: low-end hinges, one rule each.

TPU's compiler fuses, packs and windows the program without remat in ways the program with
remat cannot show: it may copy a cheap recompute into a gradient fusion's operand, repack a
layer loop's gathered operands in its backward loop, or copy a relu into each reader. None of
these is a share of the split; each is the most copies the twin may run of a counted op, kept
in `hinged` (the most of each rule, or their sum where the copies add up). The rules live in
their own modules; this module only gathers them, so that pairing.py wires one call.
"""

from __future__ import annotations

from typing import Mapping

from hloflops.remat.gradient_operand_copies import gradient_operand_copies
from hloflops.remat.matmul_loss_cotangents import loss_cotangent_hinges
from hloflops.remat.merged_recompute_hand_outs import merged_hand_out_copies
from hloflops.remat.nested_gradient_activations import nested_gradient_activations
from hloflops.remat.repacked_loop_gathers import repacked_loop_gathers
from hloflops.remat.sites import Key, SiteKey, SiteOp
from hloflops.remat.unrolled_layer_loops import pruned_input_gradients, unrolled_stack_slices
from hloflops.remat.unstored_relu_narrows import unstored_relu_narrows
from hloparse.ir import Module


def _at_least(hinged: dict[Key, int], key: Key, n: int) -> None:
    hinged[key] = max(hinged.get(key, 0), n)


def add_tpu_twin_hinges(module: Module, ops: list[SiteOp], remat: set[SiteKey], settled: set[SiteKey],
                        recomputes: frozenset[Key], fused: Mapping[str, frozenset[str]],
                        hinged: dict[Key, int], twin_narrows: dict[SiteKey, int]
                        ) -> tuple[dict[Key, int], set[Key]]:
    """Adds TPU's twin-copy hinges to `hinged` and the narrows of weight stacks an unrolled loop
    left to `twin_narrows` (both in place). `settled`: the ops already a hinge of the range
    (loose or weakly paired), which the nested-copy rules leave alone; `recomputes`: the
    instructions counted as remat, which are no input gradient and no twin's repacking.
    Returns the loss cotangent's copies the twin surely runs and the unsure narrows
    (hloflops.remat.matmul_loss_cotangents)."""
    # The loss's cotangent, a checkpoint's cheap input, a chain only the recompute stores, one a
    # fusion of its own narrows: `twin_copies` hinges, never a sure share, but the cotangent's
    # copies the twin surely runs.
    cotangent_stores, cotangent_narrows = loss_cotangent_hinges(module, hinged)
    # A recompute nested in a backward matmul's operand, which the twin may duplicate from its
    # stored input in place of the forward's stored value (gradient_operand_copies); one whose
    # forward copy its input's recompute hides from the value numbers, or holding a
    # transcendental (nested_gradient_activations): a hinge of one copy, unless already settled.
    for rule in (gradient_operand_copies, nested_gradient_activations):
        for key, n in rule(module, ops, remat, fused).items():
            if key not in settled:
                _at_least(hinged, key[:2], n)
    # A recomputed activation a backward loop's fusion hands out beside the gradient through it: the
    # twin may copy its chain once more, beside any unsure copy, since the twin may as well make
    # no more copies (merged_recompute_hand_outs).
    for key, n in merged_hand_out_copies(module, ops, fused).items():
        hinged[key[:2]] = hinged.get(key[:2], 0) + n
    # A layer loop XLA unrolled: the twin's loop may run the first layer's input gradient and
    # narrow whole weight stacks (unrolled_layer_loops).
    slices, layers = unrolled_stack_slices(module)
    for key in pruned_input_gradients(module, layers) - recomputes:
        _at_least(hinged, key, 1)
    for key, n in slices.items():
        twin_narrows[(*key, 0)] = max(twin_narrows.get((*key, 0), 0), n)
    # A layer loop's forward packings of gathered matmul operands, which the twin's backward
    # loop may pack again (repacked_loop_gathers); a relu the twin copies into each reader
    # (unstored_relu_narrows).
    for key in repacked_loop_gathers(module).keys() - recomputes:
        _at_least(hinged, key, 1)
    for key, n in unstored_relu_narrows(module).items():
        _at_least(hinged, key, n)
    return cotangent_stores, cotangent_narrows
