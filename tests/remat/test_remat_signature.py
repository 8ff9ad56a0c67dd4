"""The signature a remat-named matmul pairs by (analysis/hloflops/remat/signature.py `signature`):
which attributes of a convolution say what it computes. On TPU a recompute's attention einsum
compiled as `window={size=2x8 stride=1x7 lhs_dilate=2x8}, dim_labels=1f0b_10oi->10bf` where its
forward is `window={size=8x2 stride=7x1 lhs_dilate=8x2}, dim_labels=0f1b_01oi->01bf` (the
generator's TPU draw 0): the same convolution with its spatial dimensions numbered the other
way round. And TPU may round one copy's output to bf16 and not the other's.
"""

from __future__ import annotations

from types import SimpleNamespace

import hloparse
from hloflops.remat.signature import signature as _signature, spatial_order_free as _spatial_order_free
from hloflops.remat.op_kinds import shape_key


def _attrs(labels: str, window: str) -> tuple:
    return (("dim_labels", labels), ("window", window))


def test_spatial_dimensions_numbered_the_other_way_round_are_the_same_convolution():
    forward = _attrs("0f1b_01oi->01bf", "{size=8x2 stride=7x1 lhs_dilate=8x2}")
    recompute = _attrs("1f0b_10oi->10bf", "{size=2x8 stride=1x7 lhs_dilate=2x8}")
    assert _spatial_order_free(forward) == _spatial_order_free(recompute)


def test_a_window_on_other_dimensions_is_another_convolution():
    # the same labels, the window's sizes swapped: another computation
    one = _attrs("b01f_01io->b01f", "{size=3x1 pad=1_1x0_0}")
    other = _attrs("b01f_01io->b01f", "{size=1x3 pad=0_0x1_1}")
    assert _spatial_order_free(one) != _spatial_order_free(other)


def test_one_spatial_dimension_and_other_attributes_are_kept():
    attrs = (("dim_labels", "bf0_0io->bf0"), ("feature_group_count", "4"), ("window", "{size=3}"))
    assert _spatial_order_free(attrs) == attrs


# TPU draws 6, 10 and 49 (`benchmarks/remat_sweep.py --family tpu`): XLA folds the rounding of the
# forward's attention einsum to bf16 into its convolution, and leaves its recompute's output f32.
_MODULE = """HloModule m

ENTRY e {
  p0 = f32[2,64,8] parameter(0)
  p1 = f32[2,64,64] parameter(1)
  forward = bf16[2,8,64] convolution(p0, p1), window={size=2 lhs_dilate=2}, dim_labels=0fb_0oi->0bf
  recompute = f32[2,8,64] convolution(p0, p1), window={size=2 lhs_dilate=2}, dim_labels=0fb_0oi->0bf
  other = f32[2,8,32] convolution(p0, p1), window={size=2 lhs_dilate=2}, dim_labels=0fb_0oi->0bf
  ROOT t = (bf16[2,8,64], f32[2,8,64], f32[2,8,32]) tuple(forward, recompute, other)
}
"""


def _signatures() -> dict[str, tuple]:
    module = hloparse.parse(_MODULE)
    shapes = {inst.name: shape_key(inst.shape) for _, inst in module.instructions()}
    return {inst.name: _signature(SimpleNamespace(inst=inst), shapes) for _, inst in module.instructions()
            if inst.opcode == "convolution"}


def test_a_matmul_rounded_to_bf16_on_output_is_the_same_computation():
    signatures = _signatures()
    assert signatures["forward"] == signatures["recompute"]


def test_a_matmul_of_another_result_shape_is_another_computation():
    signatures = _signatures()
    assert signatures["other"] != signatures["recompute"]
