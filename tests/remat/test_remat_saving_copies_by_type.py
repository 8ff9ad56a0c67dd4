"""How many saving copies the program without remat makes of a recomputed value that is saved itself
and also on the chain of another residual (analysis/hloflops/remat/backward_loop_copies.py
`_saving_copies`), in a TPU scan's backward loop.

Held-out TPU draw 82 (linen_scan lm, bf16, `offload_dot_with_no_batch_dims`): jax computes each
layer norm in f32; without remat the forward loop saves `x - mean` in an f32 stack (one fusion, with
`2 * x`) and the layer norm's output, narrowed to bf16, in a bf16 stack from another fusion (TPU tiles
the two types otherwise: no multi-output fusion writes both), each fusion computing `x - mean`: two
saving copies, which the recompute's two copies (the output nested in the weight gradient's fusion,
and `x - mean` in the layer norm's gradient fusion) stand for. Counted as one, subtract was +1,048,576.
A bf16 MLP's `h` and gelu's residuals, saved in one type, share one fusion (one saving copy: the same
draw's multiply and add stay as they were). LayerNorm_0's output is nested `[1, b, t, d]` in the
projections' weight gradients: its residuals are the group's joined copies' (`_join_unit_free`).
Skipped without libtpu, as tests/remat/test_remat_tpu_generated.py."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")
pytest.importorskip("libtpu", reason="libtpu is not installed: no TPU compiler to build the programs with")

from tests.remat.generator import check, draw  # noqa: E402


def test_a_value_saved_itself_and_on_a_residual_saved_in_another_type_has_two_saving_copies(monkeypatch):
    # Other processes (a TPU catalogue job) may hold libtpu's lockfile: no chip is used here.
    monkeypatch.setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    outcome = check(draw(82, "tpu"))
    after = next(v for v in outcome.verdicts if v.stage == "after")
    assert "subtract" not in after.misses, outcome.describe()  # +1,048,576 before
    assert "multiply" not in after.misses, outcome.describe()
    assert outcome.all_ok("before"), outcome.describe()
