"""What TPU builds again inside the fusions of a weight's gradient, read against what the program
without remat builds there (analysis/hloflops/remat/fusion_copies.py).

A gelu the forward computes only nested inside its next matmul's fusion, never materialized, is
built again nested inside the weight gradient's fusion by the program without remat too: the
whole chain is model FLOPs, also the ops under its tanh (TPU draw 0, a whole-model checkpoint:
multiply +404,096 -> +10,880 after optimization).

The bias add of a matmul whose bare output the policy saves (handed out through an identity
rounding) is another matter: without remat XLA fuses the bias add into the matmul's output fusion
and stores the sum, which its backward reads, so every copy the recompute makes of it, nested in
a weight gradient's fusion or in a gradient fusion, runs because of remat (TPU draw 58: add
-163,840 -> exact once the gelu chain is model FLOPs)."""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat

GELU = """HloModule nested_gelu, is_scheduled=true

gelu_fwd {
  p0 = f32[8,16] parameter(0)
  p1 = f32[16] parameter(1)
  pb = f32[8,16] broadcast(p1), dimensions={1}
  a = f32[8,16] add(p0, pb), metadata={op_name="@F/Dense_0/add"}
  s = f32[8,16] multiply(a, a), metadata={op_name="@F/integer_pow"}
  t = f32[8,16] tanh(s), metadata={op_name="@F/tanh"}
  ROOT m = f32[8,16] multiply(a, t), metadata={op_name="@F/mul"}
}

matmul_fwd {
  q0 = f32[8,16] parameter(0)
  q1 = f32[16] parameter(1)
  q2 = f32[16,8] parameter(2)
  f = f32[8,16] fusion(q0, q1), kind=kLoop, calls=gelu_fwd
  ROOT d = f32[8,8] dot(f, q2), @D, metadata={op_name="@F/Dense_1/dot_general"}
}

gelu_bwd {
  r0 = f32[8,16] parameter(0)
  r1 = f32[16] parameter(1)
  rb = f32[8,16] broadcast(r1), dimensions={1}
  ra = f32[8,16] add(r0, rb), metadata={op_name="@R/Dense_0/add"}
  rs = f32[8,16] multiply(ra, ra), metadata={op_name="@R/integer_pow"}
  rt = f32[8,16] tanh(rs), metadata={op_name="@R/tanh"}
  ROOT rm = f32[8,16] multiply(ra, rt), metadata={op_name="@R/mul"}
}

matmul_grad {
  s0 = f32[8,16] parameter(0)
  s1 = f32[16] parameter(1)
  s2 = f32[8,8] parameter(2)
  g = f32[8,16] fusion(s0, s1), kind=kLoop, calls=gelu_bwd
  ROOT dw = f32[16,8] dot(g, s2), @G, metadata={op_name="@B/Dense_1/transpose"}
}

ENTRY main {
  x = f32[8,16] parameter(0)
  b = f32[16] parameter(1)
  w = f32[16,8] parameter(2)
  dy = f32[8,8] parameter(3)
  y = f32[8,8] fusion(x, b, w), kind=kOutput, calls=matmul_fwd
  dw = f32[16,8] fusion(x, b, dy), kind=kOutput, calls=matmul_grad
  ROOT out = (f32[8,8], f32[16,8]) tuple(y, dw)
}
"""

# x is the saved output of the layer's first matmul (`x0 @ w0`, handed out through jax's identity
# rounding), and gelu's gradient fusion re-adds the bias too.
SAVED_MATMUL = GELU.replace("ENTRY main {", """saved_matmul {
  u0 = f32[8,4] parameter(0)
  u1 = f32[4,16] parameter(1)
  ud = f32[8,16] dot(u0, u1), @D, metadata={op_name="@F/Dense_0/dot_general"}
  ROOT ur = f32[8,16] reduce-precision(ud), exponent_bits=8, mantissa_bits=23, metadata={op_name="@F/Dense_0/rp"}
}

gelu_grad {
  v0 = f32[8,16] parameter(0)
  v1 = f32[16] parameter(1)
  v2 = f32[8,16] parameter(2)
  vb = f32[8,16] broadcast(v1), dimensions={1}
  va = f32[8,16] add(v0, vb), metadata={op_name="@R/Dense_0/add"}
  vt = f32[8,16] tanh(va), metadata={op_name="@R/tanh"}
  ROOT vg = f32[8,16] multiply(v2, vt), metadata={op_name="@B/mul"}
}

ENTRY main {""").replace("""  x = f32[8,16] parameter(0)
""", """  x0 = f32[8,4] parameter(0)
  w0 = f32[4,16] parameter(4)
  x = f32[8,16] fusion(x0, w0), kind=kOutput, calls=saved_matmul
""").replace("""  dy = f32[8,8] parameter(3)
""", """  dy = f32[8,8] parameter(3)
  dh = f32[8,16] parameter(5)
  dg = f32[8,16] fusion(x, b, dh), kind=kLoop, calls=gelu_grad
""").replace("ROOT out = (f32[8,8], f32[16,8]) tuple(y, dw)",
             "ROOT out = (f32[8,8], f32[16,8], f32[8,16]) tuple(y, dw, dg)")


def _parsed(text: str):
    """The module, its op_name prefixes written out: @F the forward, @R the checkpoint's
    recompute, @B its backward; @D a matmul's dimension numbers, @G a weight gradient's."""
    for short, long in (("@R", "jit(loss)/transpose(jvp(jvp()))/checkpoint/rematted_computation/Block"),
                        ("@B", "jit(loss)/transpose(jvp(jvp()))/checkpoint/Block"), ("@F", "jit(loss)/jvp(Block)"),
                        ("@D", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
                        ("@G", "lhs_contracting_dims={0}, rhs_contracting_dims={0}")):
        text = text.replace(short, long)
    return hloparse.parse(text)


def test_a_nested_recompute_chain_under_a_transcendental_is_model_work_where_the_forward_nests_it_too():
    remat = find_remat(_parsed(GELU)).remat
    assert not {("gelu_bwd", name) for name in ("ra", "rs", "rm")} & remat


def test_the_bias_add_of_a_saved_matmul_output_is_recompute_in_every_fusion_that_copies_it():
    remat = find_remat(_parsed(SAVED_MATMUL)).remat
    assert ("gelu_bwd", "ra") in remat  # nested in the weight gradient's fusion
    assert ("gelu_grad", "va") in remat  # in gelu's gradient fusion
    assert not {("gelu_bwd", name) for name in ("rs", "rm")} & remat  # the gelu itself: as without remat
