"""Scan forms after optimization where the program without remat copies a residual's cheap chain
into the fusions that save its residuals (hloflops.remat.twin_saves), and where a policy's saved
value is read back only by the recompute (hloflops.remat.rounding, `copied_into_saves`).

Gelu MLPs in a scan: the bias add `x = h + b` is a residual of gelu's derivative and on the chain of
`3 * x * x`; the program without remat copies it into four fusions of its forward (tanh's, the
product's, and the two saving `x` and `3 * x * x`), the program with remat into one of its
forward and one of its gradient fusion. Its copies in the recompute's tanh and product fusions
are model FLOPs, and `1 + tanh` in the product fusion is a recompute (each draw reported add
+1 or +2 rows of the layer's width before). Tanh MLPs under `save_only_these_names`: the saved
pre-activation is read back only by the recomputed tanh, whose derivative reads `t`; the program
without remat saves `t`, so the bias add copied into the fusion saving the pre-activation is remat
(base seed 110: add -40,960 before)."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")

from tests.remat.generator import check, draw  # noqa: E402

CASES = [
    ("base", 132),  # linen_scan, gelu, no policy: add +3,072 before
    ("more", 148),  # nnx.scan, gelu, offload_dot_with_no_batch_dims: add +3,072 before
    ("more", 142),  # nnx.scan, gelu, nothing_saveable: exact before by two errors that cancelled
    ("base", 110),  # linen_scan, tanh, save_only_these_names: add -40,960 before
]


@pytest.mark.parametrize("family,seed", CASES)
def test_residual_chain_copies_split_as_the_twin_saves_them(family, seed):
    outcome = check(draw(seed, family))
    assert outcome.all_ok("after"), outcome.describe()
