"""Nested remat: one forward matmul is the twin of two recomputes one remat deep each
(analysis/hloflops/remat/names.py `enclosing_checkpoints`). The names are TPU draw 16's
(`benchmarks/remat_sweep.py --family tpu`: nested `nn.remat` conv net, FSDP), whose inner
recomputes of block_0 and block_1 were left without a twin (convolution -13,565,952 after
optimization): the outer checkpoint's recompute had taken the forward at depth 1.

A forward whose value the outer recompute matched exactly (one value number) is the twin of the
inner recompute too, whose value was numbered apart: base draw 249 (`linen_nested` encoder-decoder
under `save_only_these_names`), whose inner recompute of decoder block_1 was model FLOPs after
optimization (dot -6,815,744): the forward was in no signature pool once its value had paired.
"""

from __future__ import annotations

import pytest

from hloflops.remat.names import remat_depth
from hloflops.remat.names import enclosing_checkpoints

OUTER = ("jit(loss)/transpose(jvp(ConvNet))/jvp(ConvNet)/checkpoint/rematted_computation/stack/block_0/Conv_0/"
         "conv_general_dilated")
INNER = ("jit(loss)/transpose(jvp(ConvNet))/jvp(ConvNet)/checkpoint/stack/checkpoint/rematted_computation/block_0/"
         "Conv_0/conv_general_dilated")


def test_the_outer_and_the_inner_recompute_of_a_layer_are_one_remat_deep_each():
    assert remat_depth(OUTER) == remat_depth(INNER) == 1


def test_the_outer_and_the_inner_recompute_of_a_layer_are_told_apart_by_their_checkpoints():
    assert enclosing_checkpoints(OUTER) == 1
    assert enclosing_checkpoints(INNER) == 2


def test_a_forward_name_has_no_recompute_scope():
    assert enclosing_checkpoints("jit(loss)/jvp(ConvNet)/stack/checkpoint/block_0/Conv_0/conv_general_dilated") == 0


def test_a_forward_paired_by_value_at_one_level_is_the_twin_of_the_recompute_at_the_other():
    pytest.importorskip("flax")
    from tests.programs.remat_forms import build
    from tests.remat.generator import Outcome, draw
    from tests.remat.judge import judge

    form = draw(249)
    assert (form.form, form.arch) == ("linen_nested", "encdec")  # the draw this test is about
    outcome = Outcome(form, (judge(build(form), "after"),))
    assert outcome.matmul_ok("after"), outcome.describe()
