"""Scanned LMs after optimization: a square's linearization coefficient that XLA folds away in the
backward loop (hloflops.remat.folded_coefficients), and forward copies counted per value
(hloflops.remat.twin_saves).

A flax layer norm's variance `mean(x * x) - mean ** 2` linearizes through `2 * x`. The program
without remat computes that coefficient in its forward loop and saves it; the program with remat
recomputes it in its backward loop beside the gradient, where XLA folds the 2 into the row's
cotangent scale, so one full-size multiply per layer norm runs in the twin only, offsetting the
recomputed `x * x` in the per-opcode sum (multiply +4,096 per layer norm on base seed 16).

Every `LayerNorm_0/div` multiply of the forward loop counted as a copy of the layer norm's mean,
its mean square's `sum(x * x) / n` too: one forward copy too many, so one of the backward's copies
of the mean stayed remat (multiply +32 per layer norm on base seed 16). Only the forward ops of
the recompute's value count now (its abstract value or computation tree)."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")

from tests.remat.generator import check, draw  # noqa: E402
from tests.remat.judge import COUNTER_OPCODES, LOOP_TOLERANCE  # noqa: E402


# (family, seed, multiply over on 4ff9287): linen_remat_scan and linen_scan LMs, with and without
# a policy, layer norm widths 16 to 128.
CASES = [("base", 16, 8_256), ("base", 76, 8_256), ("more", 116, 198_144), ("more", 122, 17_408),
         ("more", 126, 8_448)]


@pytest.mark.parametrize("family,seed,before", CASES, ids=[f"{f}{s}" for f, s, _ in CASES])
def test_folded_square_coefficient_offsets_the_recomputed_square(family, seed, before):
    outcome = check(draw(seed, family))
    after = outcome._at("after")
    assert "multiply" not in after.misses, outcome.describe()
    assert outcome.in_bounds("after"), outcome.describe()
    assert outcome.all_ok("before"), outcome.describe()


# Scanned attention blocks whose layer norms centre first, `mean((x - mean) ** 2)`: the folded
# coefficient is `2 * (x - mean)`, and the gradient's `(x - mean) * broadcast(2 * s)` reads the
# twin's saved `2 * (x - mean)`, not its `x - mean`, which the twin saves apart for the rsqrt's
# gradient `sum((x - mean) * g)` (read here from a recompute fusion by a library reduce). On 4ff9287
# base 135 multiply -24,640 and subtract -4,074, held-out 236 multiply -65,536, 291 multiply
# -160,512 and subtract -12,261; counting the forward per value alone left 236 and 291 with subtract
# +32,768 and +24,576.
@pytest.mark.parametrize("seed", [135, 236, 291])
def test_folded_centred_square_reads_its_own_residual(seed):
    outcome = check(draw(seed, "base"))
    after = outcome._at("after")
    assert "multiply" not in after.misses, outcome.describe()
    for opcode in COUNTER_OPCODES:
        assert abs(after.misses.get(opcode, 0)) <= LOOP_TOLERANCE * after.loops, outcome.describe()
    assert outcome.all_ok("before"), outcome.describe()


# Haiku's `jnp.var` centres first, `mean(square(x - mean))`, in an hk.layer_stack loop: the recomputed
# `square` multiplies a fusion parameter by itself (the `subtract` in another fusion), the twin saves
# `2 * (x - mean)`, and the fold leaves `(x - mean) * broadcast(s * (2 / n))`. Without the give-back,
# multiply +2,097,152 on more 94 (two layer norms), +1,048,576 on more 86 (an offload policy; its add
# over, the offloaded residual's, is another cause) and +16,384 on more 98.
@pytest.mark.parametrize("seed", [94, 86, 98])
def test_folded_centred_square_in_a_haiku_layer_stack(seed):
    outcome = check(draw(seed, "more"))
    after = outcome._at("after")
    assert "multiply" not in after.misses, outcome.describe()
    assert outcome.all_ok("before"), outcome.describe()
