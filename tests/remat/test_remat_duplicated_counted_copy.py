"""Which copy of a duplicated transcendental takes its value's count (analysis/hloflops/remat/
fusion_copies.py, `_counts_passed_on`). TPU copies a recompute's tanh into every fusion reading it:
the input gradient's and the weight gradient's. `_same_value` caps the copies counted at the
forward's count (one) and picks which by order; the cap says how many copies run because of remat,
not which. Where it picked the copy in the gradient fusion, which the program without remat has
too (its forward's tanh copied there) and `fusion_copies` drops, the sibling copy in the fusion
whose output is the recompute takes the count, and the widen and narrow around it follow
(remat/type_corrections.py). TPU draw 7 (`python_loop` offload, three tanh layers): convert
-1,024 after optimization, two of the three layers' picked copies being the gradient fusion's."""

from __future__ import annotations

import pytest

import hloparse
from hloflops.remat import find_remat

# The recompute reads its input from another op than the forward (an offloaded residual read back):
# the class of the recompute's tanh copies is all remat-named, counted against the forward's tanh.
RECOMPUTE_COPIED_INTO_A_GRADIENT_FUSION = """HloModule duplicated_tanh_counted_copy, is_scheduled=true

forward {
  p0 = f32[8,16] parameter(0)
  s = f32[8,16] multiply(p0, p0), metadata={op_name="@F/integer_pow"}
  t = f32[8,16] tanh(s), metadata={op_name="@F/tanh"}
  ROOT m = f32[8,16] multiply(p0, t), metadata={op_name="@F/mul"}
}

input_grad {
  a0 = f32[8,16] parameter(0)
  a1 = f32[8,16] parameter(1)
  as = f32[8,16] multiply(a0, a0), metadata={op_name="@R/integer_pow"}
  at = f32[8,16] tanh(as), metadata={op_name="@R/tanh"}
  ROOT ag = f32[8,16] multiply(a1, at), metadata={op_name="@B/mul"}
}

recomputed {
  b0 = f32[8,16] parameter(0)
  bs = f32[8,16] multiply(b0, b0), metadata={op_name="@R/integer_pow"}
  bt = f32[8,16] tanh(bs), metadata={op_name="@R/tanh"}
  ROOT bc = bf16[8,16] convert(bt)
}

ENTRY main {
  x = f32[8,16] parameter(0)
  dy = f32[8,16] parameter(1)
  xr = f32[8,16] add(x, x)
  y = f32[8,16] fusion(x), kind=kLoop, calls=forward
  gx = f32[8,16] fusion(xr, dy), kind=kLoop, calls=input_grad
  r = bf16[8,16] fusion(xr), kind=kLoop, calls=recomputed, metadata={op_name="@R/tanh"}
  dyb = bf16[8,16] convert(dy)
  dw = f32[16,16] dot(r, dyb), lhs_contracting_dims={0}, rhs_contracting_dims={0}, metadata={op_name="@B/dot_general"}
  ROOT out = (f32[8,16], f32[8,16], f32[16,16]) tuple(y, gx, dw)
}
"""


def _parsed(text: str):
    """The module, its op_name prefixes written out: @F the forward, @R the checkpoint's
    recompute, @B its backward."""
    for short, long in (("@R", "jit(loss)/transpose(jvp(jvp()))/checkpoint/rematted_computation/Block"),
                        ("@B", "jit(loss)/transpose(jvp(jvp()))/checkpoint/Block"), ("@F", "jit(loss)/jvp(Block)")):
        text = text.replace(short, long)
    return hloparse.parse(text)


def test_the_recomputes_copy_of_a_duplicated_transcendental_takes_the_count_the_gradient_fusions_drops():
    index = find_remat(_parsed(RECOMPUTE_COPIED_INTO_A_GRADIENT_FUSION))
    assert ("recomputed", "bt") in index.remat
    assert ("input_grad", "at") not in index.remat
    assert ("forward", "t") not in index.remat  # the forward's tanh is the model's, in both programs


def test_drawn_tpu_offloaded_tanh_layers_count_their_weight_gradient_fusions_copies(monkeypatch):
    pytest.importorskip("jax")
    pytest.importorskip("libtpu", reason="libtpu is not installed: no TPU compiler to build the programs with")
    from tests.remat.generator import check, draw
    monkeypatch.setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    outcome = check(draw(7, "tpu"))
    assert outcome.all_ok("after"), outcome.describe()
