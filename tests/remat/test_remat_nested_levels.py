"""Nested remat: one forward matmul is the twin of two recomputes one remat deep each
(analysis/hloflops/remat/pairing.py `_enclosing_checkpoints`). The names are TPU draw 16's
(`benchmarks/remat_sweep.py --family tpu`: nested `nn.remat` conv net, FSDP), whose inner
recomputes of block_0 and block_1 were left without a twin (convolution -13,565,952 after
optimization): the outer checkpoint's recompute had taken the forward at depth 1.
"""

from __future__ import annotations

from hloflops.remat.names import remat_depth
from hloflops.remat.pairing import _enclosing_checkpoints

OUTER = ("jit(loss)/transpose(jvp(ConvNet))/jvp(ConvNet)/checkpoint/rematted_computation/stack/block_0/Conv_0/"
         "conv_general_dilated")
INNER = ("jit(loss)/transpose(jvp(ConvNet))/jvp(ConvNet)/checkpoint/stack/checkpoint/rematted_computation/block_0/"
         "Conv_0/conv_general_dilated")


def test_the_outer_and_the_inner_recompute_of_a_layer_are_one_remat_deep_each():
    assert remat_depth(OUTER) == remat_depth(INNER) == 1


def test_the_outer_and_the_inner_recompute_of_a_layer_are_told_apart_by_their_checkpoints():
    assert _enclosing_checkpoints(OUTER) == 1
    assert _enclosing_checkpoints(INNER) == 2


def test_a_forward_name_has_no_recompute_scope():
    assert _enclosing_checkpoints("jit(loss)/jvp(ConvNet)/stack/checkpoint/block_0/Conv_0/conv_general_dilated") == 0
