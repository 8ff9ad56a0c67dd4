"""A recompute's cast that pairs with nothing but itself (analysis/hloflops/remat/stored_forward_narrows.py).
XLA's casts carry no name: the recompute's narrow `c.r` of the recomputed product is named by what it
reads, and `by_signature` finds no other op of its signature, so it pairs with itself. That makes
it a sure recompute only where this program shows what the program without remat does with the
forward's copy of the value: it stores a narrow of it (the twin reads that narrow in its backward,
TPU draw 6), or an op that needs the value wide reads it (the twin keeps it in f32 and its backward
matmul narrows inside its own fusion, TPU draw 47). Where only the forward's matmul reads it (its
cast fused in), the twin may narrow it once where it is computed and store the narrow, as the
recompute does (240-299's draw 297, the attention probabilities: convert +8,192, the low end above
the truth): the narrow is a hinge of the range, remat at the reported value."""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat

HLO = """HloModule stored_narrows, is_scheduled=true, entry_computation_layout=@L

forward_product {
  f0 = f32[8,16] parameter(0)
  f1 = f32[8,16] parameter(1)
  ROOT p = f32[8,16] multiply(f0, f1), metadata={op_name="@F/mul"}
}

forward_matmul {
  m0 = f32[8,16] parameter(0)
  m1 = bf16[16,4] parameter(1)
  ROOT y = f32[8,4] dot(m0, m1), @D, metadata={op_name="@F/linear/dot_general"}
}

recompute {
  r0 = f32[8,16] parameter(0)
  r1 = f32[8,16] parameter(1)
  p.r = f32[8,16] multiply(r0, r1), metadata={op_name="@R/mul"}
  ROOT c.r = bf16[8,16] convert(p.r)
}

weight_gradient {
  g0 = bf16[8,16] parameter(0)
  g1 = bf16[8,4] parameter(1)
  ROOT dw = f32[16,4] dot(g0, g1), @W, metadata={op_name="@B/dot_general"}
}

ENTRY main {
  x = f32[8,16] parameter(0)
  s = f32[8,16] parameter(1)
  w = bf16[16,4] parameter(2)
  ct = bf16[8,4] parameter(3)
  p = f32[8,16] fusion(x, s), kind=kLoop, calls=forward_product, @T
  y = f32[8,4] fusion(p, w), kind=kOutput, calls=forward_matmul
  c = bf16[8,16] fusion(x, s), kind=kLoop, calls=recompute
  dw = f32[16,4] fusion(c, ct), kind=kOutput, calls=weight_gradient
  ROOT out = (f32[8,4], f32[16,4]) tuple(y, dw)
}
"""


def _parsed(text: str):
    """@F the forward, @R the checkpoint's recompute, @B its backward; @D and @W matmuls' dimensions;
    @L the entry's layout and @T TPU's backend config (what makes it a TPU module)."""
    for short, long in (("@D", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
                        ("@W", "lhs_contracting_dims={0}, rhs_contracting_dims={0}"),
                        ("@R", "jit(loss)/transpose(jvp())/checkpoint/rematted_computation"),
                        ("@B", "jit(loss)/transpose(jvp())/checkpoint"), ("@F", "jit(loss)/jvp()"),
                        ("@L", "{(f32[8,16]{1,0:T(8,128)})->f32[8,4]{1,0:T(8,128)}}"),
                        ("@T", 'backend_config={"scoped_memory_configs":[]}')):
        text = text.replace(short, long)
    return hloparse.parse(text)


def test_a_self_paired_narrow_whose_forward_only_a_matmul_reads_is_a_hinge():
    index = find_remat(_parsed(HLO))
    assert ("recompute", "c.r") in index
    assert ("recompute", "c.r") in index.weak


# The forward's product is read wide too: a residual add (`q = p + s`).
WIDE = HLO.replace("""  ROOT p = f32[8,16] multiply(f0, f1), metadata={op_name="@F/mul"}
}""", """  p = f32[8,16] multiply(f0, f1), metadata={op_name="@F/mul"}
  q = f32[8,16] add(p, f1), metadata={op_name="@F/add"}
  ROOT pq = (f32[8,16], f32[8,16]) tuple(p, q)
}""").replace("""  p = f32[8,16] fusion(x, s), kind=kLoop, calls=forward_product, @T
  y = f32[8,4] fusion(p, w), kind=kOutput, calls=forward_matmul""", """\
  pq = (f32[8,16], f32[8,16]) fusion(x, s), kind=kLoop, calls=forward_product, @T
  p = f32[8,16] get-tuple-element(pq), index=0
  y = f32[8,4] fusion(p, w), kind=kOutput, calls=forward_matmul""")


def test_a_self_paired_narrow_whose_forward_is_read_wide_is_sure():
    index = find_remat(_parsed(WIDE))
    assert ("recompute", "c.r") in index
    assert ("recompute", "c.r") not in index.weak


# The forward stores a narrow of another product of the same name (`m`, one more layer norm's
# `mul`), and two recompute's casts pair with themselves (240-299's draw 282: two layer norms'
# narrows recomputed, both named by a bare `mul`, where the forward stores one): one stored narrow
# vouches for one recompute's cast; the other is a hinge.
TWO = HLO.replace("""  ROOT p = f32[8,16] multiply(f0, f1), metadata={op_name="@F/mul"}
}""", """  p = f32[8,16] multiply(f0, f1), metadata={op_name="@F/mul"}
  a = f32[8,16] add(f0, f1), metadata={op_name="@F/mul"}
  m = f32[8,16] multiply(f0, f0), metadata={op_name="@F/mul"}
  n = bf16[8,16] convert(m)
  ROOT pan = (f32[8,16], f32[8,16], bf16[8,16]) tuple(p, a, n)
}""").replace("""weight_gradient {""", """recompute_2 {
  t0 = f32[8,16] parameter(0)
  t1 = f32[8,16] parameter(1)
  a.r = f32[8,16] add(t0, t1), metadata={op_name="@R/mul"}
  ROOT c2.r = bf16[8,16] convert(a.r)
}

weight_gradient {""").replace("""  p = f32[8,16] fusion(x, s), kind=kLoop, calls=forward_product, @T
  y = f32[8,4] fusion(p, w), kind=kOutput, calls=forward_matmul""", """\
  pan = (f32[8,16], f32[8,16], bf16[8,16]) fusion(x, s), kind=kLoop, calls=forward_product, @T
  p = f32[8,16] get-tuple-element(pan), index=0
  y = f32[8,4] fusion(p, w), kind=kOutput, calls=forward_matmul
  a = f32[8,16] get-tuple-element(pan), index=1
  y2 = f32[8,4] fusion(a, w), kind=kOutput, calls=forward_matmul""").replace("""\
  ROOT out = (f32[8,4], f32[16,4]) tuple(y, dw)""", """\
  c2 = bf16[8,16] fusion(x, s), kind=kLoop, calls=recompute_2
  dw2 = f32[16,4] fusion(c2, ct), kind=kOutput, calls=weight_gradient
  n = bf16[8,16] get-tuple-element(pan), index=2
  ROOT out = (f32[8,4], f32[16,4], f32[8,4], f32[16,4], bf16[8,16]) tuple(y, dw, y2, dw2, n)""")


def test_each_stored_narrow_vouches_for_one_recomputed_narrow():
    index = find_remat(_parsed(TWO))
    casts = [("recompute", "c.r"), ("recompute_2", "c2.r")]
    assert all(cast in index for cast in casts)
    assert sum(cast in index.weak for cast in casts) == 1
