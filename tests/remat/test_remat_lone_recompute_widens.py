"""A lone widen of a recompute's value that only recomputed ops read (hloflops.remat.widen_counts).

XLA wraps a widen alone in a fusion where the value's reader is a library fusion (layer norm's
variance `sum((x - mean) ** 2)`, a `__ynn_fusion` reduce): the forward wraps one for its own reduce
and the recompute one for the recomputed reduce, which the program without remat does not run. The
widen's mark (the recompute's value) kept it off the recompute's fusions, and where the recompute
reads its input through the checkpoint's barrier its value is numbered apart from the forward's:
`pairing` took the lone widen for the forward's copy that CSE merged (the first of its class), so
one of the recompute's two widens of `x - mean` stayed uncounted per layer norm (base seed 5, a
Python loop of attention blocks: convert -17,152 on c51a770, 16,384 of it these widens)."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")

from tests.remat.generator import check, draw  # noqa: E402


def test_lone_widen_of_a_recompute_value_read_by_recomputes_is_remat():
    outcome = check(draw(5, "base"))
    after = outcome._at("after")
    # What is left is small layer norm and softmax statistics' widens (f32[16,4], bf16[16,4,4]),
    # none of `x - mean`'s f32[16,4,64] size.
    assert after.misses.get("convert", 0) > -16 * 4 * 64, outcome.describe()
    assert outcome.in_bounds("after"), outcome.describe()
    assert outcome.all_ok("before"), outcome.describe()
