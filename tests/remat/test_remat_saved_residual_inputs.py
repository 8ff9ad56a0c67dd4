"""Before optimization, a recompute in the backward loop reads the residuals a policy saved (and
the layer's inputs) back from the saved stacks, where its forward read the ops that computed them.
Three facts the pairing needs there (hloflops.remat.values, forward_twins, pairing, by_signature):

* a saved residual (the policy's identity rounding) is, for the abstract number, an input of its
  shape: the forward's ops that read it apply the same computation to inputs of the same shapes
  as the recompute's, so they are told from the linearization's own work named in the recompute
  (a derivative's coefficient of the same shape and name: silu's `x * (1 - s)`, an RMS norm's
  `2 * x`, gelu's `3 * x ** 2`);
* such a structural twin is paired first, so that the linearization's ops only take what is left;
* a callee called at several sites (an unrolled gradient accumulation's microbatches) computes
  its forward's values once per site: the forward copies of a value are counted per site, not
  summed over the microbatches (that made jvp's second `x * x` of gelu a recompute too);
* a remat-named op of an opcode, result and name that no forward op has (sigmoid's `1 - s`), and
  what the recompute computes from it, is jvp's own work, before optimization as after it.
"""

from __future__ import annotations

import pytest

from tests.support.corpus import require_corpus

MAXTEXT = "xla_benchmark_models/tools__benchmarks__hlo__nv_maxtext_1n1g_jit_train_step_before_optimization.hlo"


def test_maxtext_recompute_pairs_the_primal_and_leaves_the_linearization_unpaired():
    """MaxText's decoder layer (a third party's module, lowered, under `jax.checkpoint` in a
    scan): the recompute's `x * rsqrt(mean(x**2) + eps)` and the gated `act * linear` product are
    the primal's and pair with the forward; `2 * x` (the derivative of `x ** 2`) and silu's
    `s * (1 - s)` are jvp's own, named inside the recompute, and are left unpaired."""
    from hloflops import analyze

    report = analyze(str(require_corpus() / MAXTEXT))
    unpaired = {(u.computation, u.name) for u in report.remat_unpaired}
    assert ("None_2.838", "multiply.881") in unpaired  # 2 * x
    assert ("silu_5.779", "multiply.788") in unpaired  # s * (1 - s)
    assert ("None_2.838", "multiply.892") not in unpaired  # x * rsqrt(...)
    assert ("None_2.838", "multiply.1054") not in unpaired  # act * linear


# Draws of the long sweep that were off before optimization (reported - truth): 79 multiply -81,920
# and divide -1,024, 82 multiply -49,152, 87 multiply -18,432, 146 maximum -1,536 (gradient
# accumulation, unrolled), 106 six opcodes (a scan, unroll=2, of attention layers); 107 multiply
# +8,192 and 138 +16,384 (a BiLSTM tagger: sigmoid's `s * (1 - s)`, named in the recompute, took the
# twin of the forward's `o * tanh(c)`, which the backward never recomputes; `_linearization_only`
# now runs before optimization too).
@pytest.mark.parametrize("seed", [79, 82, 87, 106, 146, 107, 138])
def test_recompute_reading_saved_stacks_every_opcode_before_optimization(seed):
    pytest.importorskip("jax")
    pytest.importorskip("flax")
    from tests.remat.generator import check, draw

    outcome = check(draw(seed))
    assert outcome.all_ok("before"), outcome.describe()
