"""A value the forward nests into two or more matmul fusions, never materialized, and the
recompute nests into a weight gradient's fusion (analysis/hloflops/remat/stored_matmul_operands.py).
The program without remat may nest it again into every reader (TPU draws 157, 220) or store it
once for all of them (TPU draw 182: a layer norm stored narrowed, subtract -10,240, add -10,240,
multiply -22,016 below the high end): the recompute's nested copy and the forward's beyond the
first are a hinge, reported as model FLOPs with the high end counting them. One forward reader
leaves the range as it was."""

from __future__ import annotations

from hloflops.accounting import account
from hloflops.remat import find_remat

from tests.remat.test_remat_nested_fusions import NESTED_FORWARD, _parsed

# The forward nests the bias add into a second matmul's fusion too (a block's key beside its query).
TWO_FORWARD_READERS = NESTED_FORWARD.replace(
    "  y = f32[8,8] fusion(x, b, w), kind=kOutput, calls=matmul_fwd\n",
    "  y = f32[8,8] fusion(x, b, w), kind=kOutput, calls=matmul_fwd\n"
    "  w2 = f32[16,8] parameter(4)\n"
    "  y2 = f32[8,8] fusion(x, b, w2), kind=kOutput, calls=matmul_fwd\n").replace(
    "ROOT out = (f32[8,8], f32[16,8]) tuple(y, dw)", "ROOT out = (f32[8,8], f32[8,8], f32[16,8]) tuple(y, y2, dw)")


def _bounds(text: str) -> tuple[int, int]:
    return account(_parsed(text), xla={"flops": 0.0}).remat_flops_bounds


def test_a_recompute_nested_in_a_weight_gradient_is_a_hinge_where_the_forward_nests_it_into_two_matmuls():
    module = _parsed(TWO_FORWARD_READERS)
    assert ("bias_bwd", "ra") not in find_remat(module)  # reported as model FLOPs
    low, high = _bounds(TWO_FORWARD_READERS)
    # the recompute's copy, 128 adds, at the high end only (before: an exact [256, 256])
    assert high - low >= 128


def test_one_forward_reader_leaves_the_nested_recompute_exact():
    assert _bounds(NESTED_FORWARD)[1] == _bounds(NESTED_FORWARD)[0]
