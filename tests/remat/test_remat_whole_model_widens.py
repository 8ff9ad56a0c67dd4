"""Float normalization's widens under a checkpoint around the whole model (after optimization,
CPU; analysis/hloflops/remat/whole_checkpoint_widens.py).

The forward of a whole-model `nn.remat` stores nothing but the policy's residuals: XLA copies each
cheap value into every fusion reading it, widening what it reads there (the embedding's gather in
each layer norm's and residual add's fusion), while the recompute, which hands the backward every
intermediate as the program without remat's forward does, is split into fusions the same way as
that forward. So the forward's widens of checkpointed values run because of remat, the
recompute's are the program without remat's; counting the recompute's widens up to the forward's
number, value by value, missed the forward's widens beyond the recompute's and those of values
the recompute widens under another name (base 63: convert +1,024; base 112, under
`dots_with_no_batch_dims_saveable`: +4,096).
"""

from __future__ import annotations

import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")

from tests.remat.generator import check, draw  # noqa: E402


@pytest.mark.parametrize("seed, family", [(63, "base"), (112, "base")])
def test_forward_widens_of_a_whole_model_checkpoint_are_remat(seed, family):
    outcome = check(draw(seed, family))
    after = next(v for v in outcome.verdicts if v.stage == "after")
    assert "convert" not in after.misses, outcome.describe()
