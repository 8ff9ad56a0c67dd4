"""Two ways a recompute's copies were miscounted after optimization (issue 28).

A class of remat-marked copies whose value no forward op shares (the recompute read inputs that XLA
built otherwise than the forward's) counts as many copies as the forward's copies of the value,
found by signature and name (hloflops.remat.forward_twins `ForwardTwins`). In an unrolled scan over
stacked weights every layer reads the same frame inputs, so the layer norms of all layers were
taken as this layer's forward (base draws 68, 102, 166: add +256, multiply +512). A forward value
whose recompute at the class's depth matched it exactly is that recompute's, not this class's.

A backward op that reads no gradient (XLA folded its cotangent to a constant: softmax's `1 / s`)
merges with the recompute's op of the same value and keeps the backward's name (base draw 82:
divide -128). It is the recompute's (hloflops.remat.marks `inherit_names`).
"""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat

LAYERS = """HloModule layers, is_scheduled=true

ENTRY main {
  x = f32[8,32] parameter(0)
  k = f32[] constant(0.0625)
  kb = f32[8,32] broadcast(k), dimensions={}
  e = f32[] constant(1e-06)
  eb = f32[8,32] broadcast(e), dimensions={}
  m0 = f32[8,32] multiply(x, kb), metadata={op_name="@F/div"}
  v0 = f32[8,32] add(m0, eb), metadata={op_name="@F/add"}
  r0 = f32[8,32] rsqrt(v0), metadata={op_name="@F/rsqrt"}
  h1 = f32[8,32] tanh(r0), metadata={op_name="@F/tanh"}
  m1 = f32[8,32] multiply(h1, kb), metadata={op_name="@F/div"}
  v1 = f32[8,32] add(m1, eb), metadata={op_name="@F/add"}
  r1 = f32[8,32] rsqrt(v1), metadata={op_name="@F/rsqrt"}
  m0.r = f32[8,32] multiply(x, kb), metadata={op_name="@R/div"}
  v0.r = f32[8,32] add(m0.r, eb), metadata={op_name="@R/add"}
  r0.r = f32[8,32] rsqrt(v0.r), metadata={op_name="@R/rsqrt"}
  h1.r = f32[8,32] sine(r0.r), metadata={op_name="@R/tanh"}
  m1.r = f32[8,32] multiply(h1.r, kb), metadata={op_name="@R/div"}
  v1.r = f32[8,32] add(m1.r, eb), metadata={op_name="@R/add"}
  v1.j = f32[8,32] add(m1.r, eb), metadata={op_name="@R/add"}
  r1.r = f32[8,32] rsqrt(v1.r), metadata={op_name="@R/rsqrt"}
  d1 = f32[8,32] divide(r1.r, v1.j), metadata={op_name="@R/div"}
  ROOT out = (f32[8,32], f32[8,32], f32[8,32]) tuple(r1, r1.r, d1)
}
"""

SOFTMAX = """HloModule softmax, is_scheduled=true

sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[2,32,32] parameter(0)
  ct = f32[2,32] parameter(1)
  zero = f32[] constant(0)
  one = f32[] constant(1)
  ones = f32[2,32] broadcast(one), dimensions={}, metadata={op_name="@F/div"}
  e = f32[2,32,32] exponential(x), metadata={op_name="@F/exp"}
  s = f32[2,32] reduce(e, zero), dimensions={2}, to_apply=sum, metadata={op_name="@F/reduce_sum"}
  inv = f32[2,32] divide(ones, s), metadata={op_name="@F/div"}
  e.r = f32[2,32,32] exponential(x), metadata={op_name="@R/exp"}
  s.r = f32[2,32] reduce(e.r, zero), dimensions={2}, to_apply=sum, metadata={op_name="@R/reduce_sum"}
  inv.r = f32[2,32] divide(ones, s.r), metadata={op_name="@B/div"}
  g = f32[2,32] multiply(ct, inv.r), metadata={op_name="@B/mul"}
  g2 = f32[2,32] divide(g, s.r), metadata={op_name="@B/div"}
  sq.r = f32[2,32] multiply(s.r, s.r), metadata={op_name="@R/mul"}
  k = f32[2,32] divide(s.r, sq.r), metadata={op_name="@B/div"}
  ROOT out = (f32[2,32], f32[2,32], f32[2,32]) tuple(inv, g2, k)
}
"""


def _parsed(text: str):
    """The module, its op_name prefixes written out: @F the forward, @R the checkpoint's recompute,
    @B the checkpoint's backward."""
    for short, long in (("@R", "jit(loss)/transpose(jvp())/closed_call/checkpoint/rematted_computation"),
                        ("@B", "jit(loss)/transpose(jvp())/closed_call/checkpoint"),
                        ("@F", "jit(loss)/jvp()/closed_call")):
        text = text.replace(short, long)
    return hloparse.parse(text)


def test_a_forward_value_its_own_recompute_matched_is_no_other_class_forward():
    """Both layers read only `x`: the frame inputs cannot tell layer 0's `var + eps` (`v0`) from
    layer 1's (`v1`). The recompute of layer 1 reads an input numbered apart from the forward's
    (here `sine` stands for what XLA built otherwise), so its two copies `v1.r`, `v1.j` (the
    recompute's, and the linearization's for rsqrt's derivative) share no number with `v1`; `v0`
    is matched exactly by layer 0's recompute `v0.r`. Layer 1's forward computes its value once:
    one copy is recompute, not two."""
    index = find_remat(_parsed(LAYERS))
    assert ("main", "v0.r") in index
    assert [name for name in ("v1.r", "v1.j") if ("main", name) in index] == ["v1.r"]


def test_a_checkpoint_transpose_op_reading_no_gradient_is_the_recompute():
    """`inv.r`, named in the checkpoint's backward, divides a constant (where the cotangent was,
    folded) by the recompute's sum: the recompute of the forward's `inv`. `g` and `g2` read the
    cotangent: the backward's own. `k` reads recomputed values alone, no constant: a
    coefficient of the linearization that jax evaluates in the transpose, the backward's too."""
    index = find_remat(_parsed(SOFTMAX))
    assert ("main", "inv.r") in index
    assert ("main", "g") not in index and ("main", "g2") not in index and ("main", "k") not in index
    assert ("main", "inv") not in index
