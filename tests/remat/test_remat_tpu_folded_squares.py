"""A centred variance's square whose coefficient XLA folded away, in a TPU backward loop
(analysis/hloflops/remat/tpu_folded_squares.py).

jax linearizes Haiku's `jnp.var` square `d * d` as `g * (2 * d)`. Without remat the forward loop
computes `2 * d` and saves it; with remat the backward loop recomputes `d * d` beside the gradient,
and XLA folds the `2` into the reduced cotangent's broadcast: one full-size multiply per layer norm
runs only in the program without remat, so the square's recompute is model FLOPs per opcode. TPU
draw 1 (hk.layer_stack attention, one device) counted it: multiply +2,097,152 after optimization,
half of it these squares (one per layer norm, two loop trips). The other half was the layer norms'
`scale * rsqrt(var)`, which the program without remat's saving fusion computes twice
(tests/remat/test_remat_saving_copies_per_residual.py); reduce +261,632 is a bias gradient's
partial sum the program without remat alone peels out of its loop.
Skipped without libtpu, as tests/remat/test_remat_tpu_generated.py."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")
pytest.importorskip("haiku")
pytest.importorskip("libtpu", reason="libtpu is not installed: no TPU compiler to build the programs with")

from tests.remat.generator import check, draw  # noqa: E402


def test_tpu_folded_variance_squares_are_not_counted_remat(monkeypatch):
    monkeypatch.setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    outcome = check(draw(1, "tpu"))
    after = next(v for v in outcome.verdicts if v.stage == "after")
    # The two squares given back (one per layer norm, 262,144 elements, two trips).
    assert "multiply" not in after.misses, outcome.describe()
    assert outcome.in_bounds("after"), outcome.describe()
    assert outcome.all_ok("before"), outcome.describe()
