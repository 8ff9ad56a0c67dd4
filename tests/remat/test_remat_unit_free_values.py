"""A stored forward value whose recompute's copies hold it with a unit dimension more or less
(one value number: hloflops.remat.values looks through unit dimensions), and a recompute fusion
materializing a value the forward only writes transposed (hloflops.remat.natural_layouts), after
optimization.

A layer norm's recompute takes `rsqrt` of a `[b, t, 1]` bitcast of the variance where the forward
takes it of the `[b, t]` sums, so everything computed from it (the attention over the normalized
input, the residual sum `x + attn @ wo`) would be a value of its own to a numbering op by op. The
forward stores that residual sum, so the program without remat reads it stored in its gradient
fusions: every recompute copy of it is remat (base seeds 105 and 136 missed add -8,192 and
-16,384: eight copies in gradient fusions taken for the program without remat's own).

An attention key `x @ w + b` read transposed by the scores and as it is by the query's gradient is
copied by XLA into one fusion per layout; the program without remat builds both in its forward.
Where the forward with remat writes only the transposed one and the recompute's copy of that was
merged into it, the recompute's fusion handing the key out as it is stands in for the program
without remat's own (base seeds 8 and 278 over-counted add +4,096 and +16,384)."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")

from tests.remat.generator import check, draw  # noqa: E402
from tests.remat.judge import LOOP_TOLERANCE  # noqa: E402


def _exact_add(seed: int) -> None:
    outcome = check(draw(seed, "base"))
    after = outcome._at("after")
    slack = LOOP_TOLERANCE * after.loops  # add counts loops: 64 FLOPs a loop
    assert abs(after.misses.get("add", 0)) <= slack, outcome.describe()
    assert outcome.in_bounds("after"), outcome.describe()
    assert outcome.all_ok("before"), outcome.describe()


@pytest.mark.parametrize("seed", [105, 136])  # Python loops of attention layers: add -8,192, -16,384 before
def test_stored_residual_sum_numbered_apart_by_unit_dimensions_is_recomputed_in_gradient_fusions(seed):
    _exact_add(seed)


@pytest.mark.parametrize("seed", [8, 278])  # cross attention's key (encoder-decoder), self attention's (nested LM)
def test_recompute_materializing_a_value_the_forward_only_lays_out_stands_in_for_the_twins(seed):
    _exact_add(seed)
