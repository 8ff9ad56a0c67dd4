"""Scanned LMs after optimization: a square's linearization coefficient that XLA folds away in the
backward loop (hloflops.remat.folded_coefficients), and forward copies counted per value
(hloflops.remat.twin_saves).

A flax layer norm's variance `mean(x * x) - mean ** 2` linearizes through `2 * x`. The program
without remat computes that coefficient in its forward loop and saves it; the program with remat
recomputes it in its backward loop beside the gradient, where XLA folds the 2 into the row's
cotangent scale, so one full-size multiply per layer norm runs in the twin only, offsetting the
recomputed `x * x` in the per-opcode sum (multiply +4,096 per layer norm on base seed 16).

Every `LayerNorm_0/div` multiply of the forward loop counted as a copy of the layer norm's mean,
its mean square's `sum(x * x) / n` too: one forward copy too many, so one of the backward's copies
of the mean stayed remat (multiply +32 per layer norm on base seed 16). Only the forward ops of
the recompute's value count now (its abstract value or computation tree)."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")

from tests.remat.generator import check, draw  # noqa: E402


# (family, seed, multiply over on 4ff9287): linen_remat_scan and linen_scan LMs, with and without
# a policy, layer norm widths 16 to 128.
CASES = [("base", 16, 8_256), ("base", 76, 8_256), ("more", 116, 198_144), ("more", 122, 17_408),
         ("more", 126, 8_448)]


@pytest.mark.parametrize("family,seed,before", CASES, ids=[f"{f}{s}" for f, s, _ in CASES])
def test_folded_square_coefficient_offsets_the_recomputed_square(family, seed, before):
    outcome = check(draw(seed, family))
    after = outcome._at("after")
    assert "multiply" not in after.misses, outcome.describe()
    assert outcome.in_bounds("after"), outcome.describe()
    assert outcome.all_ok("before"), outcome.describe()
