"""Roundings that follow what they round, counted value by value (after optimization, CPU;
analysis/hloflops/remat/widen_counts.py `_read_round_trips`, normalization.py
`recompute_barrier_roundings`).

Held-out base draw 217, a bf16 gelu MLP in nested `nn.remat` (linen_nested): XLA computes each
`Dense_0` matmul once (CSE merged the recompute's into the forward's library fusion) and copies
its rounding to bf16 (narrow, then widen) into every loop fusion reading it: the forward's gelu
fusion and the recompute's bias-add fusion. The program without remat has one such fusion. The
widen of the recompute's copy was counted (hloflops.remat.widen_counts); the narrowing it widens,
which runs once per such fusion as well, was not. And the outer recompute's residual sum handed
to the next block's checkpoint is rounded under the checkpoint primitive's name (`.../remat2`):
the rounding of a recomputed op, remat like the op. Before the rules: convert -3,584.
"""

from __future__ import annotations

import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")

from tests.remat.generator import check, draw  # noqa: E402


def test_roundings_copied_into_recompute_fusions_follow_their_widen_and_op():
    outcome = check(draw(217, "base"))
    after = next(v for v in outcome.verdicts if v.stage == "after")
    assert not after.misses, outcome.describe()


def test_a_stored_rounding_the_recompute_reads_is_remat_beside_the_forwards_own():
    """Base draw 54 (bf16 attention, unrolled gradient accumulation): softmax's `exp` leaves its
    fusion in f32; the forward's `e / s` fusion rounds it itself (narrow, widen), and a lone
    narrowing fusion stores it rounded for the recompute's `e / s` and the backward. The program
    without remat stores it once and its forward reads the stored value. Before the rule (and the
    recompute fusion's side, which a backward-named broadcast of `1 / s` hid): convert -176,128;
    what is left (-12,288) is under one stored rounding of `exp` (16,384 elements)."""
    outcome = check(draw(54, "base"))
    after = next(v for v in outcome.verdicts if v.stage == "after")
    assert abs(after.misses.get("convert", 0)) < 16384, outcome.describe()
