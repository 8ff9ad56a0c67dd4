"""A recomputed cheap value XLA copies into a fusion of only the linearization's own work (a layer
norm's `var + eps`, read by rsqrt's coefficient `rsqrt(v) / v`): the program without remat makes
that copy too, in the forward fusion computing the coefficient it saves, while the forward with
remat computes no coefficient. So that copy is model FLOPs even where `_same_value` counted it
against the forward's copies, and where the count it drops was taken from a sibling copy, that
sibling takes it back (hloflops.remat.fusion_copies, `_coefficient_counts_passed_on`)."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")

from tests.remat.generator import check, draw  # noqa: E402


def test_a_coefficients_copy_of_var_plus_eps_is_model_flops():
    # held-out base draw 265: a whole-model checkpoint of two attention layers; the last
    # recomputed layer norm's `var + eps` (and its `sum / n`) in the coefficient's fusion were
    # counted (add and multiply +32 after optimization).
    outcome = check(draw(265, "base"))
    assert outcome.all_ok("after"), outcome.describe()


def test_a_count_taken_from_a_sibling_copy_moves_back():
    # base draw 131 (linen_remat_scan, layer norms in the backward loop): exact before this rule
    # and after, where the count dropped in a coefficient's fusion moves to the rsqrt's copy.
    outcome = check(draw(131, "base"))
    assert outcome.all_ok("after"), outcome.describe()
