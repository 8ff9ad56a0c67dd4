"""The forward's narrow of an activation `t = tanh(x @ w + b)` nested, matmul and all, in the next
matmul's fusion, where the backward reads the recomputed `t` wide
(analysis/hloflops/remat/activation_output_narrows.py). With the layer checkpointed the forward's
`t` is read by the next matmul alone: TPU nests the chain in that matmul's fusion and narrows `t`
to bf16 there (`inner`'s unnamed convert `c`). The program without remat stores `t` in f32 for its
backward (tanh's derivative reads it: the gradient fusion's multiply of the recompute's `t.r`) and
its next matmul reads it from memory, no convert (TPU draws 140, 168 and 149: convert -1,024,
-49,152 and -768 after optimization). The narrow is remat, in the range (loose): it rests on how
XLA fused the program without remat."""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat

HLO = """HloModule activation_output, is_scheduled=true, entry_computation_layout=@L

inner {
  i0 = f32[8,16] parameter(0)
  i1 = f32[16,32] parameter(1)
  i2 = f32[32] parameter(2)
  d = f32[8,32] dot(i0, i1), @D, metadata={op_name="@F/linear/dot_general"}
  b = f32[8,32] broadcast(i2), dimensions={1}
  a = f32[8,32] add(d, b), metadata={op_name="@F/linear/add"}
  t = f32[8,32] tanh(a), metadata={op_name="@F/tanh"}
  ROOT c = bf16[8,32] convert(t)
}

outer {
  o0 = f32[8,16] parameter(0)
  o1 = f32[16,32] parameter(1)
  o2 = bf16[32,4] parameter(2)
  o3 = f32[32] parameter(3)
  h = bf16[8,32] fusion(o0, o1, o3), kind=kOutput, calls=inner
  ROOT y = f32[8,4] dot(h, o2), @D, metadata={op_name="@F/linear_1/dot_general"}
}

recompute {
  r0 = f32[8,16] parameter(0)
  r1 = f32[16,32] parameter(1)
  r2 = f32[32] parameter(2)
  d.r = f32[8,32] dot(r0, r1), @D, metadata={op_name="@R/linear/dot_general"}
  b.r = f32[8,32] broadcast(r2), dimensions={1}
  a.r = f32[8,32] add(d.r, b.r), metadata={op_name="@R/linear/add"}
  ROOT t.r = f32[8,32] tanh(a.r), metadata={op_name="@R/tanh"}
}

gradient {
  g0 = f32[8,32] parameter(0)
  g1 = f32[8,32] parameter(1)
  ROOT g = f32[8,32] multiply(g0, g1), metadata={op_name="@B/mul"}
}

ENTRY main {
  x = f32[8,16] parameter(0)
  w = f32[16,32] parameter(1)
  v = bf16[32,4] parameter(2)
  bias = f32[32] parameter(3)
  ct = f32[8,32] parameter(4)
  y = f32[8,4] fusion(x, w, v, bias), kind=kOutput, calls=outer, @T
  tr = f32[8,32] fusion(x, w, bias), kind=kOutput, calls=recompute
  g = f32[8,32] fusion(tr, ct), kind=kLoop, calls=gradient
  ROOT out = (f32[8,4], f32[8,32]) tuple(y, g)
}
"""


def _parsed(text: str):
    """@F the forward, @R the checkpoint's recompute, @B its backward; @D a matmul's dimensions;
    @L the entry's layout and @T TPU's backend config (what makes it a TPU module)."""
    for short, long in (("@D", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
                        ("@R", "jit(loss)/transpose(jvp())/checkpoint/rematted_computation"),
                        ("@B", "jit(loss)/transpose(jvp())/checkpoint"), ("@F", "jit(loss)/jvp()"),
                        ("@L", "{(f32[8,16]{1,0:T(8,128)})->f32[8,4]{1,0:T(8,128)}}"),
                        ("@T", 'backend_config={"scoped_memory_configs":[]}')):
        text = text.replace(short, long)
    return hloparse.parse(text)


def test_a_forward_narrow_of_an_activation_the_backward_reads_wide_is_remat_in_the_range():
    index = find_remat(_parsed(HLO))
    assert ("recompute", "d.r") in index and ("inner", "d") not in index
    assert ("inner", "c") in index
    assert ("inner", "c") in index.weak  # rests on fusion: the range's low end leaves it out


def test_a_narrow_of_an_activation_the_backward_reads_only_in_matmuls_is_left_alone():
    # The recompute's `t` read by a backward matmul alone: the program without remat may store it
    # narrowed for its matmuls, the narrow its as well (TPU draw 2's key projection).
    text = HLO.replace('  ROOT g = f32[8,32] multiply(g0, g1), metadata={op_name="@B/mul"}',
                       '  ROOT g = f32[32,32] dot(g0, g1), lhs_contracting_dims={0}, rhs_contracting_dims={0}, '
                       'metadata={op_name="@B/dot_general"}').replace(
        "  g = f32[8,32] fusion(tr, ct), kind=kLoop, calls=gradient",
        "  g = f32[32,32] fusion(tr, ct), kind=kOutput, calls=gradient").replace(
        "(f32[8,4], f32[8,32]) tuple(y, g)", "(f32[8,4], f32[32,32]) tuple(y, g)")
    index = find_remat(_parsed(text))
    assert ("recompute", "d.r") in index
    assert ("inner", "c") not in index


def test_a_narrow_in_a_loop_body_is_left_alone():
    # A scan's forward body: the program without remat writes `t` into its residual stack with a
    # fusion that hands the next matmul a narrowed copy too, the same narrow (TPU draw 13).
    text = HLO.replace("""ENTRY main {""", """body {
  s = (f32[8,16], f32[16,32], bf16[32,4], f32[32], f32[8,4]) parameter(0)
  bx = f32[8,16] get-tuple-element(s), index=0
  bw = f32[16,32] get-tuple-element(s), index=1
  bv = bf16[32,4] get-tuple-element(s), index=2
  bb = f32[32] get-tuple-element(s), index=3
  by = f32[8,4] fusion(bx, bw, bv, bb), kind=kOutput, calls=outer, @T
  ROOT bs = (f32[8,16], f32[16,32], bf16[32,4], f32[32], f32[8,4]) tuple(bx, bw, bv, bb, by)
}

cond {
  cs = (f32[8,16], f32[16,32], bf16[32,4], f32[32], f32[8,4]) parameter(0)
  ROOT ck = pred[] constant(false)
}

ENTRY main {""").replace("""  y = f32[8,4] fusion(x, w, v, bias), kind=kOutput, calls=outer, @T""",
                         """  y0 = f32[8,4] constant({...})
  st = (f32[8,16], f32[16,32], bf16[32,4], f32[32], f32[8,4]) tuple(x, w, v, bias, y0)
  l = (f32[8,16], f32[16,32], bf16[32,4], f32[32], f32[8,4]) while(st), condition=cond, body=body
  y = f32[8,4] get-tuple-element(l), index=4""")
    index = find_remat(_parsed(text))
    assert ("recompute", "d.r") in index
    assert ("inner", "c") not in index
