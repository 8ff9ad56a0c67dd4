"""A softmax's `e / s` recomputed in a scan's backward loop: XLA turns it into `e * (1 / s)`, and
the backward's own `ct / s` into `ct * (1 / s)`; CSE keeps one `1 / s` for both, under the
recompute's name. The program without remat computes `1 / s` in its backward loop too (from the
saved `s`), so that divide is model FLOPs (hloflops.remat.shared_reciprocals). Where the forward
runs in the same computation (a Python loop of `nn.remat` blocks), the program without remat shares
the forward's `1 / s` with its backward instead, and the recompute's is remat."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")

from tests.remat.generator import check, draw  # noqa: E402


def _after(outcome):
    return next(v for v in outcome.verdicts if v.stage == "after")


def test_a_scans_recomputed_reciprocal_the_backward_shares_is_model_flops():
    # `more` draw 126: nn.scan of nn.remat LM blocks under `nothing_saveable` (divide +512 before;
    # its elementwise ops still miss after optimization: only the divide is asserted).
    outcome = check(draw(126, "more"))
    after = _after(outcome)
    assert "divide" not in after.misses, outcome.describe()
    assert outcome.in_bounds("after"), outcome.describe()


def test_a_python_loops_recomputed_reciprocal_stays_remat():
    # `more` draw 63: the same LM as a Python loop of nn.remat blocks, exact on every opcode.
    outcome = check(draw(63, "more"))
    assert outcome.all_ok("after"), outcome.describe()


def test_an_unrolled_scans_recomputed_reciprocal_beside_its_residual_stack_is_model_flops():
    # `base` draw 106: a three-layer scan unrolled by two; XLA removes its one-trip loops, so the
    # forward and the recompute share one computation, which still stacks the scan's residuals
    # (concatenates of unit-leading forward values). The program without remat's backward reads
    # `s` through that stack and computes `1 / s` itself: the recompute's is model FLOPs, as in a
    # rolled scan (divide +512 before; its layer norm copies still miss: only the divide is asserted).
    outcome = check(draw(106, "base"))
    after = _after(outcome)
    assert "divide" not in after.misses, outcome.describe()
    assert outcome.in_bounds("after"), outcome.describe()


def test_a_one_step_scans_recomputed_reciprocal_without_a_stack_stays_remat():
    # `base` draw 27: a one-layer scan, its loops removed and nothing stacked: the program without
    # remat's backward shares the forward's `1 / s`, and the recompute's is remat (divide +512).
    outcome = check(draw(27, "base"))
    assert outcome.all_ok("after"), outcome.describe()
