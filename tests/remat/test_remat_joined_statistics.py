"""A join of two inputs' chains on a residual's chain in a TPU scan's backward loop
(analysis/hloflops/remat/backward_loop_copies.py `_joined_values`).

flax's layer norm computes its variance uncentred, `mean(x * x) - mean(x) ** 2`, an elementwise
op of two values each computed from one sum. The program without remat computes it once in its
forward loop, in the fusion saving `rsqrt(var + eps)`, and hands it out to the fusions saving the
other residuals (the max's derivative, `-0.5 * rsqrt / (var + eps)`): copying it into each would
make each read two sums for one. So it, the square and the mean of squares make no saving copy,
and every copy the backward loop makes of them runs because of remat. The mean, handed out of its
fusion for `x - mean` too, is computed once more in the variance's fusion: one saving copy (TPU
draw 10, linen_scan: subtract -512 after optimization, one `[b, t]` variance per layer norm counted
short; the square's miss had cancelled the mean's in multiply). Skipped without libtpu, as
tests/remat/test_remat_tpu_generated.py."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")
pytest.importorskip("libtpu", reason="libtpu is not installed: no TPU compiler to build the programs with")

from tests.remat.generator import check, draw  # noqa: E402


def test_a_join_of_two_sums_and_its_operands_have_no_saving_copy(monkeypatch):
    # Other processes (a TPU catalogue job) may hold libtpu's lockfile: no chip is used here.
    monkeypatch.setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    outcome = check(draw(10, "tpu"))
    after = next(v for v in outcome.verdicts if v.stage == "after")
    assert "subtract" not in after.misses and "multiply" not in after.misses, outcome.describe()
    assert outcome.in_bounds("after"), outcome.describe()
