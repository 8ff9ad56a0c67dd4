"""A transcendental XLA duplicated into several gradient fusions (analysis/hloflops/remat/fusion_copies.py,
`duplicated_expensive`). XLA's fusion pass never duplicates an expensive op, so on CPU a remat-named
tanh inside a fusion is a recompute of its own, and so is the cheap chain under it. TPU does copy
a transcendental into each fusion that reads it: with remat, one recompute's tanh (same value,
same name) shows up in the fusions of the weight's and of the input's gradient alike, and the
program without remat copies its forward's gelu into the same gradient fusions. There the chain is
a copy like any cheap op's: model FLOPs, unsure (TPU draws 48 and 54, gradient accumulation over
whole-model checkpoints: multiply +109,792 -> +27,872 and +583,680 -> +59,392, now in range). A
gradient fusion whose output is XLA's unnamed bf16 convert is named by what it converts."""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat

TWO_COPIES = """HloModule duplicated_tanh, is_scheduled=true

forward {
  p0 = f32[8,16] parameter(0)
  s = f32[8,16] multiply(p0, p0), metadata={op_name="@F/integer_pow"}
  t = f32[8,16] tanh(s), metadata={op_name="@F/tanh"}
  ROOT m = f32[8,16] multiply(p0, t), metadata={op_name="@F/mul"}
}

grad_a {
  a0 = f32[8,16] parameter(0)
  a1 = f32[8,16] parameter(1)
  as = f32[8,16] multiply(a0, a0), metadata={op_name="@R/integer_pow"}
  at = f32[8,16] tanh(as), metadata={op_name="@R/tanh"}
  ag = f32[8,16] multiply(a1, at), metadata={op_name="@B/mul"}
  ROOT ac = bf16[8,16] convert(ag)
}

grad_b {
  b0 = f32[8,16] parameter(0)
  b1 = f32[8,16] parameter(1)
  bs = f32[8,16] multiply(b0, b0), metadata={op_name="@R/integer_pow"}
  bt = f32[8,16] tanh(bs), metadata={op_name="@R/tanh"}
  ROOT bg = f32[8,16] subtract(b1, bt), metadata={op_name="@B/sub"}
}

ENTRY main {
  x = f32[8,16] parameter(0)
  dy = f32[8,16] parameter(1)
  y = f32[8,16] fusion(x), kind=kLoop, calls=forward
  ga = bf16[8,16] fusion(x, dy), kind=kLoop, calls=grad_a
  gb = f32[8,16] fusion(x, dy), kind=kLoop, calls=grad_b
  ROOT out = (f32[8,16], bf16[8,16], f32[8,16]) tuple(y, ga, gb)
}
"""

# The recompute's tanh in one fusion only: XLA did not duplicate it, and it runs because of remat.
ONE_COPY = TWO_COPIES.replace("  gb = f32[8,16] fusion(x, dy), kind=kLoop, calls=grad_b\n", "").replace(
    "ROOT out = (f32[8,16], bf16[8,16], f32[8,16]) tuple(y, ga, gb)", "ROOT out = (f32[8,16], bf16[8,16]) tuple(y, ga)")


def _parsed(text: str):
    """The module, its op_name prefixes written out: @F the forward, @R the checkpoint's
    recompute, @B its backward."""
    for short, long in (("@R", "jit(loss)/transpose(jvp(jvp()))/checkpoint/rematted_computation/Block"),
                        ("@B", "jit(loss)/transpose(jvp(jvp()))/checkpoint/Block"), ("@F", "jit(loss)/jvp(Block)")):
        text = text.replace(short, long)
    return hloparse.parse(text)


def test_the_chain_under_a_transcendental_xla_duplicated_into_gradient_fusions_is_model_work_unsure():
    index = find_remat(_parsed(TWO_COPIES))
    assert not {("grad_a", "as"), ("grad_b", "bs")} & index.remat
    assert {("grad_a", "as"), ("grad_b", "bs")} <= index.unsure


def test_the_chain_under_a_transcendental_recomputed_once_is_recompute():
    assert ("grad_a", "as") in find_remat(_parsed(ONE_COPY)).remat
