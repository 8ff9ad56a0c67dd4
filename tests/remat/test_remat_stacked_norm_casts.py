"""A layer norm's output cast, recomputed in a scan's backward loop, is a residual the program
without remat stores in a bfloat16 stack (CPU, after optimization).

`nn.scan` of a bf16 LM block under `save_only_these_names` (more 73; held-out more 155 with
`save_and_offload_only_these_names`): jax casts each layer norm's f32 output to bf16
(`LayerNorm_k/convert_element_type`) for the matmuls that read it, and their weights' gradients
read that cast value. The program without remat stacks it in its forward loop (its twin's
`add_convert_fusion` feeding a dynamic-update-slice), paying the stack's round trip of float
normalization (hloflops.remat.stored_twin_copies: 2 * trips + 2 slice-sized converts per trip);
this program recomputes it under the checkpoint's name and stores nothing. The round trips were
taken only for the recompute's cast of a loop input (a kernel) and float normalization's unnamed
narrowings; a named cast of a value the recompute computes now counts as such a residual.
More 73: convert +1,626,624 -> +1,135,104 (in range both); held-out more 155: +24,207,360 ->
+15,818,752. What remains is the gelu residuals' share: the first residual computed from the
policy's saved projection is taken to stand for this program's stack of it, while the program
without remat stacks that projection too (tanh's `t` is one stack more there)."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")

from tests.programs.remat_forms import build  # noqa: E402
from tests.remat.generator import draw  # noqa: E402
from tests.remat.judge import judge  # noqa: E402


def test_recomputed_layer_norm_casts_are_stacked_residuals_of_the_twin():
    verdict = judge(build(draw(73, "more")), "after")
    assert verdict.in_bounds, verdict.describe()
    # before: +1,626,624 (the two layer norms' casts' stacks, 3 trips, not taken off)
    assert 0 <= verdict.misses.get("convert", 0) <= 1_135_104, verdict.describe()
    assert verdict.reported.get("dot", 0) == verdict.truth.get("dot", 0), verdict.describe()
