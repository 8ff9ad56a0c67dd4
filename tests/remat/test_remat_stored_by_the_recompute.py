"""A value the recompute stores that the forward splits and copies (after optimization;
analysis/hloflops/remat/stored_by_the_recompute.py).

Under a whole-model checkpoint the backward reads the recompute's embedding lookup, so the
forward's lookup has forward readers only: XLA puts the gather in a fusion of its own and copies
the index clamp and the out-of-range mask (`jnp.take`'s `lt`, `add`, `select`, `ge`, `le`, `and`,
`select`) into each reader. The recompute, like the program without remat's forward, computes the
lookup in one fusion and stores it. Base draws 63, 83, 112 and 145 missed those copies: and,
compare and select short by (readers - 1) copies of the mask (63: and -48, compare -144,
select -3120, add -48). The convert misses of these draws are another matter, left as they were.
"""

from __future__ import annotations

import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")

from tests.remat.generator import check, draw  # noqa: E402

MASK_OPCODES = ("and", "compare", "select")


@pytest.mark.parametrize("seed", [63, 83, 112, 145])
def test_forward_copies_of_a_lookup_the_recompute_stores_are_remat(seed):
    outcome = check(draw(seed))
    after = next(v for v in outcome.verdicts if v.stage == "after")
    misses = {op: miss for op, miss in after.misses.items() if op in MASK_OPCODES}
    assert not misses, outcome.describe()
