"""A recomputed value's copy that holds its elements with a unit dimension more is a copy of that
value, not a value of its own with its own saving copy (analysis/hloflops/remat/backward_loop_copies.py
`_join_unit_free`), and the folded square of an uncentred variance is given back like a centred one's
(analysis/hloflops/remat/tpu_folded_squares.py), in a TPU scan's backward loop.

TPU draw 10 (linen_scan lm, tensor parallel): the backward loop recomputes LayerNorm_0's output
`(x - mean) * (r * scale) + bias` in two gradient fusions and, as `[1, b, t, d]`, in the fusion
feeding a weight gradient's matmul. Numbered apart, that copy made a group of one whose only copy
was taken for the program without remat's saving copy: add and subtract counted one `[b, t, d]`
copy per trip short (-3,584 and -2,560). Joined, multiply counted the uncentred variance's square
`x * x` (flax's `mean(x * x) - mean(x) ** 2`) once too many (+4,096): without remat the forward
saves its coefficient `2 * x`, with remat XLA folds the `2` away; given back, multiply is exact.
What add and subtract still miss are less than one such copy (`[b, t]` statistics ops).
Skipped without libtpu, as tests/remat/test_remat_tpu_generated.py."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")
pytest.importorskip("libtpu", reason="libtpu is not installed: no TPU compiler to build the programs with")

from tests.remat.generator import check, draw  # noqa: E402


def test_a_unit_dimension_copy_of_a_recomputed_value_joins_its_copies(monkeypatch):
    # Other processes (a TPU catalogue job) may hold libtpu's lockfile: no chip is used here.
    monkeypatch.setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    outcome = check(draw(10, "tpu"))
    after = next(v for v in outcome.verdicts if v.stage == "after")
    full = 4_096  # one [b, t, d] copy as the judge counts it over the loop's trips (a miss before)
    assert "multiply" not in after.misses, outcome.describe()
    assert after.misses.get("add", 0) > -full // 2, outcome.describe()
    assert after.misses.get("subtract", 0) > -full // 2, outcome.describe()
    assert outcome.in_bounds("after"), outcome.describe()
    assert outcome.all_ok("before"), outcome.describe()
