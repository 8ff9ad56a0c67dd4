"""An offload policy's saved residual after optimization on CPU (hloflops.remat.unmarked_saves):
no identity rounding marks it, but the backward loop reads its stack only in the recompute. The
forward ops XLA copied into the fusion storing it run because of remat: the program without remat
saves what its linearization reads (tanh's `t`), never `h`.

Held-out more 195 (`tanh(x @ w + b)` in `hk.layer_stack` under `save_and_offload_only_these_names`):
the bias add copied into the saving fusion, add -8,192 and out of range before."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")
pytest.importorskip("haiku")

from tests.remat.generator import check, draw  # noqa: E402


def test_bias_add_copied_into_an_offloaded_residuals_save_is_remat():
    outcome = check(draw(195, "more"))
    assert outcome.all_ok("after"), outcome.describe()
