"""A recompute's widens of a value numbered apart from the forward's (hloflops.remat.widen_counts).

In a Python loop of attention blocks (base seeds 5 and 129) each later layer's recompute reads its
input through the checkpoint's barrier, so its layer norm's `x - mean` and `var + eps` (and
softmax's row sums) are numbered apart from the forward's and named by a bare primitive: no forward
widen of them was in sight, and `pairing` took one of the recompute's widens for the forward's copy
that CSE merged. That widen was often XLA's lone widen of `x - mean` for the variance's library
reduce, only recomputed ops reading it, which its mark kept off the recompute's fusions. The
forward's values of the same primitive, shape and frame are all widened as often: that count now
stands for the numbered-apart value's forward. On c51a770 base 5 convert -17,152 (16,384 of it
four lone widens of `x - mean`), base 129 -1,536 (two lone widens counting +8,192 and the
statistics' widens -9,728)."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")

from tests.remat.generator import check, draw  # noqa: E402


@pytest.mark.parametrize("seed", [5, 129])
def test_recompute_value_numbered_apart_counts_as_its_primitives_forward_widens(seed):
    outcome = check(draw(seed, "base"))
    assert "convert" not in outcome._at("after").misses, outcome.describe()
    assert outcome.all_ok("after"), outcome.describe()
    assert outcome.all_ok("before"), outcome.describe()
