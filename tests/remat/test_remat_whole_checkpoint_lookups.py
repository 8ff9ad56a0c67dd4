"""A whole-model checkpoint whose recompute reads CSE's shared values: the split of its embedding
lookup's widens (hloflops.remat.whole_checkpoint_widens, `beyond`).

Under `dots_saveable` with `prevent_cse` (base 145, an encoder-decoder), CSE still shares some of
the attention's values (softmax's `exp` and row sums) between the forward and the recompute, and
the forward hands the backward a weight's cast. Either closed the whole-model gate, so the
embedding's widens were counted value by value. But the forward widens the gathered rows (three
fusions per embedding), the recompute the masked rows (five, as the program without remat's
forward does). No name joins the two values, and two of the recompute's widens (`wrapped_convert`
of each embedding) were counted as well: convert +32,768. Values the recompute computes from
program inputs by loop fusions alone, past no shared value and no library op, are its own, and
the whole-model split holds for them. Held-out base 238 (attention's query, key and value shared)
is a guard: opening the whole gate for shared reads had moved it out of range. More 30 (a conv
net's per-layer checkpoint, whose forward hands the backward only weight casts) is the other: the
forward's widen of a kernel's cast keeps the value-by-value count there (+73,728 otherwise)."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")

from tests.remat.generator import check, draw  # noqa: E402


@pytest.mark.parametrize("seed, family", [(145, "base"), (238, "base"), (30, "more")])
def test_lookup_widens_under_a_whole_model_checkpoint_with_shared_values(seed, family):
    outcome = check(draw(seed, family))
    assert outcome.all_ok("after"), outcome.describe()
    assert outcome.all_ok("before"), outcome.describe()
