"""The forms issue 28 lists, each at a size where it failed, judged on every opcode against its
twin without the remat wrapper (tests/remat/judge.py), after optimization and before.

Measured before the fix (jax 0.10.2, CPU), hloflops' remat FLOPs minus the truth, per opcode
(what is still short after it: `KNOWN` below):

- nnx, 8 layers in a Python loop, nnx.remat per layer, gelu, Adam (B16 D64 H256): after
  add +32,768, before multiply +65,536 (with tanh the split was already exact);
- plain-jax gradient accumulation, 4 microbatches x 6 jax.checkpoint attention layers, every
  scan unroll=True: after multiply -393,728 subtract -114,688 add +1,280; before multiply
  +986,112 divide +3,072 (with MLP layers exact);
- lax.scan(unroll=True) over 6 checkpointed attention layers: after multiply -393,472 subtract
  -98,304 add +1,280; before multiply +986,112 divide +3,072;
- jax.checkpoint(model.apply) around a transformer LM (B8 T64 D64 H256, 2 blocks): after multiply
  -254,467 and five other opcodes; before multiply +692,224 divide +2,047;
- encoder-decoder with cross-attention, nn.remat per decoder block, and the same nested in an
  nn.remat'd decoder stack (B8 T32 D64 H256): after multiply -124,928 select -33,280 add +32,768
  ...; before multiply +363,520 divide +1,536;
- BiLSTM tagger under dots_with_no_batch_dims_saveable (B16 T16 D64): after reduce-precision
  -786,432 subtract -98,464 add +131,072; before multiply +98,304 reduce-precision -262,144;
- Equinox list of eqx.filter_checkpoint blocks, gelu (B32 D128 H512, 6 blocks): after add
  +98,304, before multiply +196,608.
"""

from __future__ import annotations

import functools

import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")

from tests.programs.remat_forms import Form, build  # noqa: E402
from tests.remat.judge import STAGES, judge  # noqa: E402

ATTN = dict(arch="attn", width=64, hidden=256, heads=4)
FORMS = {
    "nnx_loop_8_layers_adam": Form("nnx_loop", layers=8, batch=16, width=64, hidden=256, act="gelu", adam=True),
    "grad_accumulation_unrolled": Form("grad_accumulation", layers=6, micro=4, unroll=True, batch=4, tokens=16,
                                       **ATTN),
    "scan_unrolled_attention": Form("scan_unrolled", layers=6, batch=8, tokens=32, **ATTN),
    "whole_model_checkpoint_lm": Form("whole_model_checkpoint", arch="lm", layers=2, batch=8, tokens=64, width=64,
                                      hidden=256),
    "encdec_remat_per_decoder_block": Form("linen_loop", arch="encdec", layers=2, batch=8, tokens=32, width=64,
                                           hidden=256),
    "encdec_nested_in_remat_stack": Form("linen_nested", arch="encdec", layers=2, batch=8, tokens=32, width=64,
                                         hidden=256),
    "bilstm_dots_with_no_batch_dims": Form("linen_loop", arch="bilstm", policy="dots_with_no_batch_dims_saveable",
                                           batch=16, tokens=16, width=64),
    "eqx_filter_checkpoint_list": Form("eqx_list", layers=6, batch=32, width=128, hidden=512, act="gelu"),
}


# Found by the generator (tests/remat/generator.py, seeds 2, 12 and 24), failing on the dots
# before the fix: the CPU library fusion that runs the attention einsums drops their op_name, so
# the recompute's copies carried no remat name (dot -4,194,304, -8,388,608 and -65,536 after
# optimization).
FORMS.update({
    "whole_model_checkpoint_lm_library_dots": Form("whole_model_checkpoint", arch="lm", policy="nothing_saveable",
                                                   batch=8, width=16, hidden=128, heads=1, tokens=64, layers=2,
                                                   act="relu"),
    "linen_whole_lm_no_prevent_cse": Form("linen_whole", arch="lm", prevent_cse=False, batch=16, width=64,
                                          hidden=128, heads=1, tokens=32, layers=2, act="relu"),
    "scan_unroll_2_attention": Form("scan_unrolled", arch="attn", policy="nothing_saveable", batch=2, width=32,
                                    hidden=64, heads=1, tokens=16, layers=1, unroll=2, act="relu"),
})

# Every opcode, still short after the fix (measured, reported - truth), held as strict xfails:
# after optimization XLA fuses the elementwise ops of the two programs differently (the softmax's
# and layer norm's cheap ops copied into other fusions), which the rule does not yet follow.
# The BiLSTM is exact before optimization since sigmoid's `s * (1 - s)`, named in the recompute,
# is the linearization's own there too (it took the twin of the forward's `o * tanh(c)`, which
# the backward never recomputes: multiply +32,768; issue 28, ninth round). The whole-model checkpoint's
# 1-flop loss division (the gradient's seed passed through the checkpoint's barrier, which the
# program without remat divides while tracing) is remat FLOPs and found (issue 28, third round);
# after optimization, so are that scale's copies in the checkpoint's transpose, and the layer
# norms' scalings are counted once per forward value: both whole-model checkpoints are exact
# (issue 28, sixth round). Both encoder-decoders are exact after optimization since a recompute's
# fusion writing the backward's layout of a cheap value is model FLOPs (remat/view_copies.py) and
# a signature pairing offers the twin of the shortest name first (they missed add +32,768). The
# LM under `prevent_cse=False` is exact after optimization since the recompute's rsqrt pairs with
# its forward through a unit-dimension bitcast and the forward-named variance chain under it is
# its copy (remat/views.py, remat/expensive_chains.py; it missed multiply -1,536, add, maximum,
# subtract -512).
# Unrolled gradient accumulation and the unrolled scan are exact after optimization since a
# layer's all-marked copies count only forward values no recompute of their level matched
# (remat/forward_twins.py: every layer reads the same stacked weights, and other layers' layer
# norms were counted as this one's forward copies; they missed multiply +1,280, add +64 / +256).
# The unrolled scan of attention is exact after optimization since every recompute copy of a value
# the forward stores (the residual sum) is remat, gradient fusions too (remat/stored_forwards.py;
# it missed add -6,144; issue 28, tenth round). The BiLSTM is exact after optimization since the
# copies of a linearization coefficient (the cell's `1 - tanh(c)`) in the backward loop's gradient
# fusions are remat beyond one (remat/fusion_copies.py `_linearization_coefficients`; it missed
# subtract -98,464; issue 28, eleventh round).
AFTER = "after optimization XLA fuses the two programs' elementwise ops differently"
KNOWN: dict[tuple[str, str], str] = {}


@functools.lru_cache(maxsize=None)
def judged(name: str, stage: str):
    return judge(build(FORMS[name]), stage)


def _case(name: str, stage: str):
    if (name, stage) in KNOWN:
        return pytest.param(name, stage, marks=pytest.mark.xfail(strict=True, reason=KNOWN[(name, stage)]))
    return pytest.param(name, stage)


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("name", list(FORMS))
def test_issue_form_remat_dot_flops_are_the_difference_to_its_twin(name, stage):
    verdict = judged(name, stage)
    assert not verdict.twin_remat, verdict.describe()
    for opcode in ("dot", "convolution"):
        assert verdict.reported.get(opcode, 0) == verdict.truth.get(opcode, 0), verdict.describe()


@pytest.mark.parametrize(("name", "stage"), [_case(n, s) for n in FORMS for s in STAGES])
def test_issue_form_remat_flops_are_the_difference_to_its_twin_on_every_opcode(name, stage):
    verdict = judged(name, stage)
    assert verdict.ok, verdict.describe()
