"""A recompute chain that starts at the recompute's own cast of a bias (after optimization;
analysis/hloflops/remat/stored_by_the_recompute.py, `_reads_recompute`).

Held-out base draw 227 (a one-layer bf16 scan of an lm block under
`dots_with_no_batch_dims_saveable`, tanh): the recompute computes the residual sum
`h = x + bf16(attn @ wo + b)` in one fusion and hands it out to the backward, as the program
without remat's forward does. With remat the forward's `h` has forward readers only, so XLA hands
out `bf16(attn @ wo + b)` and copies `h` (its add and two widens) into the four fusions reading it.
The recompute's fusion reads its own cast of the bias `b` (a fusion of its own, remat-marked),
which made the rule take the chain for one that starts inside the recompute; the forward hands
out the same cast, and the program without remat reads that one. Before: add -768 and
convert -1,536 (three of the four copies missed)."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")

from tests.remat.generator import check, draw  # noqa: E402


def test_forward_copies_of_a_residual_sum_read_through_a_recomputed_bias_cast_are_remat():
    outcome = check(draw(227))
    after = next(v for v in outcome.verdicts if v.stage == "after")
    misses = {op: miss for op, miss in after.misses.items() if op in ("add", "convert")}
    assert not misses, outcome.describe()
