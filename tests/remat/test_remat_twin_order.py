"""Which recompute takes a forward twin by signature (hloflops.remat.by_signature) when a marked
copy in a gradient fusion competes for it.

After optimization XLA copies a cheap recompute into each fusion reading it: a fusion that hands
the recompute out (for a weight gradient's matmul) and the gradient fusion of the activation,
whose outputs are the backward's alone. Where neither copy's value equals the forward's (a bf16
round trip XLA put on one path), both look for the forward's op of their signature and name, and
only one twin is there. The copy in the gradient fusion is the program without remat's own
(`fusion_copies` drops it), so the recompute handed out takes the twin (base seed 125, a bf16
LM: the last block's gelu product, multiply -262,144 before)."""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat

# The gradient fusion is listed first: by order alone its copy would take the twin.
TWO_COPIES = """HloModule twin_order, is_scheduled=true

gradient {
  g0 = f32[8,16] parameter(0)
  g1 = f32[8,16] parameter(1)
  g2 = f32[8,16] parameter(2)
  ga = f32[8,16] abs(g0)
  gm = f32[8,16] multiply(ga, g1), metadata={op_name="@R/mlp/mul"}
  ROOT gd = f32[8,16] multiply(gm, g2), metadata={op_name="@B/mlp/mul"}
}

recompute {
  r0 = f32[8,16] parameter(0)
  r1 = f32[8,16] parameter(1)
  rm = f32[8,16] multiply(r0, r1), metadata={op_name="@R/mlp/mul"}
  rn = bf16[8,16] convert(rm)
  ROOT rw = f32[8,16] convert(rn)
}

forward {
  f0 = f32[8,16] parameter(0)
  f1 = f32[8,16] parameter(1)
  fc = f32[8,16] negate(f0)
  ROOT fm = f32[8,16] multiply(fc, f1), metadata={op_name="@F/mlp/mul"}
}

ENTRY main {
  x = f32[8,16] parameter(0)
  y = f32[8,16] parameter(1)
  dy = f32[8,16] parameter(2)
  w = f32[16,16] parameter(3)
  f = f32[8,16] fusion(x, y), kind=kLoop, calls=forward
  h = f32[8,16] dot(f, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="@F/mlp/dot"}
  r = f32[8,16] fusion(x, y), kind=kLoop, calls=recompute
  dw = f32[16,16] dot(r, dy), lhs_contracting_dims={0}, rhs_contracting_dims={0}, metadata={op_name="@B/mlp/dot"}
  g = f32[8,16] fusion(x, y, dy), kind=kLoop, calls=gradient
  ROOT o = (f32[8,16], f32[16,16], f32[8,16]) tuple(h, dw, g)
}
"""


def _parsed(text: str):
    """The module, its op_name prefixes written out: @F the forward, @R the checkpoint's
    recompute, @B its backward."""
    for short, long in (("@R", "jit(loss)/transpose(jvp(f))/checkpoint/rematted_computation"),
                        ("@B", "jit(loss)/transpose(jvp(f))/checkpoint"), ("@F", "jit(loss)/jvp(f)")):
        text = text.replace(short, long)
    return hloparse.parse(text)


def test_the_recompute_a_fusion_hands_out_takes_the_twin_before_a_gradient_fusions_copy():
    index = find_remat(_parsed(TWO_COPIES))
    assert ("recompute", "rm") in index.remat
    assert ("recompute", "rm") not in index.unsure
    assert ("gradient", "gm") not in index.remat  # the program without remat copies it there too
