"""Recompute copies of a value the forward stores (analysis/hloflops/remat/stored_forwards.py).

Where the forward computes a value once and hands it out of its fusion as it is (a residual sum
`x + attn @ wo` that a reduce reads beside other readers), the program without remat stores it
too and its backward reads it stored: every copy the recompute makes of it runs because of remat,
in the gradient fusions as well (base seed 142, a Python loop of attention layers under
`dots_saveable`: add -14,336 -> exact). So does a copy of a value the forward computes once
inside that fusion only to build the stored value (`hk.MultiHeadAttention`'s output bias add
under the residual sum, more seed 111: add -79,872 -> exact). Where the forward copies the value
into a fusion without storing it, the program without remat copies it into its gradient fusions
as the recompute does: the copy there is model FLOPs, as before."""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat

STORED = """HloModule stored_residual, is_scheduled=true

residual {
  a0 = f32[8,16] parameter(0)
  a1 = f32[8,16] parameter(1)
  ROOT s = f32[8,16] add(a0, a1), metadata={op_name="@F/add"}
}

reduce_add {
  c0 = f32[] parameter(0)
  c1 = f32[] parameter(1)
  ROOT c = f32[] add(c0, c1)
}

forward_sum {
  e0 = f32[8,16] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[8] reduce(e0, z), dimensions={1}, to_apply=reduce_add, metadata={op_name="@F/reduce_sum"}
}

recompute_sum {
  f0 = f32[8,16] parameter(0)
  f1 = f32[8,16] parameter(1)
  ra = f32[8,16] add(f0, f1), metadata={op_name="@R/add"}
  z = f32[] constant(0)
  ROOT rr = f32[8] reduce(ra, z), dimensions={1}, to_apply=reduce_add, metadata={op_name="@R/reduce_sum"}
}

gradient {
  g0 = f32[8,16] parameter(0)
  g1 = f32[8,16] parameter(1)
  g2 = f32[8,16] parameter(2)
  rb = f32[8,16] add(g0, g1), metadata={op_name="@R/add"}
  ROOT g = f32[8,16] multiply(rb, g2), metadata={op_name="@B/mul"}
}

ENTRY main {
  x = f32[8,16] parameter(0)
  w = f32[16,16] parameter(1)
  dy = f32[8,16] parameter(2)
  h = f32[8,16] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="@F/dot_general"}
  x1 = f32[8,16] fusion(x, h), kind=kLoop, calls=residual
  m = f32[8] fusion(x1), kind=kInput, calls=forward_sum
  rm = f32[8] fusion(x, h), kind=kInput, calls=recompute_sum
  dx = f32[8,16] fusion(x, h, dy), kind=kLoop, calls=gradient
  ROOT out = (f32[8], f32[8], f32[8,16]) tuple(m, rm, dx)
}
"""

# The forward copies the sum into the fusion of its reduce instead of storing it.
COPIED = STORED.replace("""  x1 = f32[8,16] fusion(x, h), kind=kLoop, calls=residual
  m = f32[8] fusion(x1), kind=kInput, calls=forward_sum
""", """  m = f32[8] fusion(x, h), kind=kInput, calls=forward_copy
""").replace("ENTRY main {", """forward_copy {
  k0 = f32[8,16] parameter(0)
  k1 = f32[8,16] parameter(1)
  ka = f32[8,16] add(k0, k1), metadata={op_name="@F/add"}
  z = f32[] constant(0)
  ROOT kr = f32[8] reduce(ka, z), dimensions={1}, to_apply=reduce_add, metadata={op_name="@F/reduce_sum"}
}

ENTRY main {""")

# The forward adds a bias to the matmul's output inside the fusion storing the residual sum; the
# recompute copies both adds into the gradient fusion.
BIASED = STORED.replace("""residual {
  a0 = f32[8,16] parameter(0)
  a1 = f32[8,16] parameter(1)
  ROOT s = f32[8,16] add(a0, a1), metadata={op_name="@F/add"}
}""", """residual {
  a0 = f32[8,16] parameter(0)
  a1 = f32[8,16] parameter(1)
  a2 = f32[16] parameter(2)
  ab = f32[8,16] broadcast(a2), dimensions={1}
  bias = f32[8,16] add(a1, ab), metadata={op_name="@F/linear/add"}
  ROOT s = f32[8,16] add(a0, bias), metadata={op_name="@F/add"}
}""").replace("""gradient {
  g0 = f32[8,16] parameter(0)
  g1 = f32[8,16] parameter(1)
  g2 = f32[8,16] parameter(2)
  rb = f32[8,16] add(g0, g1), metadata={op_name="@R/add"}""", """gradient {
  g0 = f32[8,16] parameter(0)
  g1 = f32[8,16] parameter(1)
  g2 = f32[8,16] parameter(2)
  g3 = f32[16] parameter(3)
  gb = f32[8,16] broadcast(g3), dimensions={1}
  rbias = f32[8,16] add(g1, gb), metadata={op_name="@R/linear/add"}
  rb = f32[8,16] add(g0, rbias), metadata={op_name="@R/add"}""").replace(
    "  x1 = f32[8,16] fusion(x, h), kind=kLoop, calls=residual",
    "  b = f32[16] parameter(3)\n  x1 = f32[8,16] fusion(x, h, b), kind=kLoop, calls=residual").replace(
    "  rm = f32[8] fusion(x, h), kind=kInput, calls=recompute_sum\n", "").replace(
    "  dx = f32[8,16] fusion(x, h, dy), kind=kLoop, calls=gradient",
    "  dx = f32[8,16] fusion(x, h, dy, b), kind=kLoop, calls=gradient").replace(
    "ROOT out = (f32[8], f32[8], f32[8,16]) tuple(m, rm, dx)", "ROOT out = (f32[8], f32[8,16]) tuple(m, dx)")


def _parsed(text: str):
    """The module, its op_name prefixes written out: @F the forward, @R the checkpoint's
    recompute, @B its backward."""
    for short, long in (("@R", "jit(loss)/transpose(jvp(jvp()))/checkpoint/rematted_computation"),
                        ("@B", "jit(loss)/transpose(jvp(jvp()))/checkpoint"), ("@F", "jit(loss)/jvp()")):
        text = text.replace(short, long)
    return hloparse.parse(text)


def test_every_recompute_copy_of_a_value_the_forward_stores_is_remat_gradient_fusions_too():
    remat = find_remat(_parsed(STORED)).remat
    assert ("recompute_sum", "ra") in remat
    assert ("gradient", "rb") in remat  # the program without remat reads the stored sum there


def test_a_copy_in_a_gradient_fusion_of_a_value_the_forward_copies_without_storing_it_is_model_work():
    remat = find_remat(_parsed(COPIED)).remat
    assert ("recompute_sum", "ra") in remat
    assert ("gradient", "rb") not in remat  # the program without remat copies its forward's there


def test_a_bias_add_the_forward_computes_only_inside_the_stored_sum_is_remat_where_it_feeds_its_recompute():
    remat = find_remat(_parsed(BIASED)).remat
    assert {("gradient", "rbias"), ("gradient", "rb")} <= remat
