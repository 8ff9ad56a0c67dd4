"""The signature a remat-named matmul pairs by (analysis/hloflops/remat/pairing.py `_signature`):
which attributes of a convolution say what it computes. On TPU a recompute's attention einsum
compiled as `window={size=2x8 stride=1x7 lhs_dilate=2x8}, dim_labels=1f0b_10oi->10bf` where its
forward is `window={size=8x2 stride=7x1 lhs_dilate=8x2}, dim_labels=0f1b_01oi->01bf` (the
generator's TPU draw 0): the same convolution with its spatial dimensions numbered the other
way round.
"""

from __future__ import annotations

from hloflops.remat.pairing import _spatial_order_free


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
