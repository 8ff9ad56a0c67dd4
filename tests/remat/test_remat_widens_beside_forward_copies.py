"""A recompute fusion whose value `pairing` left to the forward's copy still widens what it reads
for its recompute (hloflops.remat.widen_counts, `_beside_a_forward_copy`).

Under a whole-model `nn.remat` (base 83, a two-block LM) the recompute's residual sum
`x + (h @ w + b)` is computed in one fusion with the bias add. The sum's forward copies count
(hloflops.remat.whole_checkpoint_widens), so none of that fusion's outputs is remat and it sat on
no side of the widen count. Its widen of the bias's cast, which the forward's fusion widens too and
the program without remat once, went uncounted on both sides: convert -48 (three 16-element
biases). Such a fusion's widen of a forward value now counts as a recompute fusion's, value by
value. Base 77 (a recompute fusion none of whose ops is remat: the program without remat runs it
too) is the guard."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")

from tests.remat.generator import check, draw  # noqa: E402


@pytest.mark.parametrize("seed", [83, 77])
def test_forward_value_widened_beside_a_forward_copy_counts_value_by_value(seed):
    outcome = check(draw(seed, "base"))
    assert outcome.all_ok("after"), outcome.describe()
    assert outcome.all_ok("before"), outcome.describe()
