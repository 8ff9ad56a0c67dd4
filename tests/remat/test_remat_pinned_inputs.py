"""The backward's widens of a checkpoint input the checkpoint's barrier pinned narrow (after
optimization, CPU; analysis/hloflops/remat/pinned_inputs.py).

A Python-loop bf16 LM with `nn.remat` per block: the forward leaves each block's residual add in
f32; the next block's checkpoint re-reads its input through its barrier as bf16, narrowed under
the checkpoint's own name (`.../transpose(...)/remat2`), and the recompute's layer norm and
residual add and the layer-norm gradient's fusions each widen it again, where the program without
remat's backward reads the forward's f32 value. Before the rule, the convert misses were four
widens of the block input per block boundary (base 125: -1,048,576, more 29: -2,097,152).
"""

from __future__ import annotations

import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")

from tests.remat.generator import check, draw  # noqa: E402


@pytest.mark.parametrize("seed, family", [(125, "base"), (29, "more")])
def test_backward_widens_of_a_pinned_checkpoint_input_are_remat(seed, family):
    outcome = check(draw(seed, family))
    after = next(v for v in outcome.verdicts if v.stage == "after")
    assert "convert" not in after.misses, outcome.describe()
