"""Converts of a value CSE shares between the forward and the recompute (after optimization, CPU;
analysis/hloflops/remat/whole_checkpoint_widens.py, `shared_value_converts`).

Under a checkpoint around the whole model, the recompute's first matmuls read only program inputs
(the input's layer norm, the weights' casts), as the forward's do: XLA's CSE keeps one of each, and
the recompute reads the forward's value. That value is computed once, as in the program without
remat, which narrows it once to store it and widens it in each fusion reading it (the attention's
query, key and value relaid out for the scores, the weighted sum and the backward). This program
does that for the recompute and the backward, and its forward rounds the value again in place in
fusions of its own (a narrow and a widen each, the forward storing nothing): those converts are
what remat adds. Nothing marked them: the value is named as a forward op, the fusions are unnamed,
and the recompute reading a forward value kept the whole-model rules off (base 202: convert
-49,152, out of range; 238: -24,576; 222, an MLP whose first matmul the recompute's tanh fusion
rounds itself, one widen of it counted already: -1,024, out of range).
"""

from __future__ import annotations

import pytest

pytest.importorskip("jax")

from tests.remat.generator import check, draw  # noqa: E402


@pytest.mark.parametrize("seed", [202, 222, 238])
def test_forward_converts_of_a_value_shared_with_the_recompute_are_remat(seed):
    outcome = check(draw(seed, "base"))
    after = next(v for v in outcome.verdicts if v.stage == "after")
    assert "convert" not in after.misses, outcome.describe()


def test_round_trips_of_a_shared_value_the_rule_counts_nothing_of_stay_counted():
    """Base draw 54 (a saving policy, unrolled gradient accumulation): the recompute reads the
    forward's residual sums (`add`, f32[8,32,64]) as it reads its softmax `exp`, and both pass as
    shared values. Of `exp` the forward-only fusions make a rounding of their own, which the rule
    counts; of the residual sums none does, so the rule counts nothing of them, and the recompute
    fusions' round trips (a narrow beside its counted widen) are left to `_read_round_trips`.
    Keeping every shared value's converts from the round trips dropped two narrows (convert
    -65,536). What is left (-32,768) is w1's transposed weight casts (-20,480) and the -12,288
    under one stored rounding of `exp` (test_remat_read_roundings)."""
    outcome = check(draw(54, "base"))
    after = next(v for v in outcome.verdicts if v.stage == "after")
    assert after.misses.get("convert", 0) >= -32768, outcome.describe()
