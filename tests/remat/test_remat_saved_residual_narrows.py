"""The converts with which the program without remat saves tanh's `1 - t` narrowed
(hloflops.remat.saved_residual_narrows): in a scan's backward loop on TPU, a tanh recomputed for
a weight's gradient is `narrow(tanh(widen(x)))`, and the gradient fusion computes `1 - t` from its
own wide tanh and the widened bf16 constant `1`. The program without remat computes `1 - t` in its
forward loop and stores it narrowed, widening that constant: two converts offsetting the
recompute's two.

Hand-written after TPU draw 37 of the generator (fori_loop MLP in bf16 with tanh, policy
dots_with_no_batch_dims_saveable: convert +4,096 after optimization where both programs run as
many converts).
"""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat

_CORRECTED = 'backend_config={"float_type_correction_info":{"original_type":"BF16"}}'

SCAN = """HloModule scan_tanh, is_scheduled=true, entry_computation_layout=@L

tanh_fwd {
  p0 = bf16[8,16] parameter(0)
  pw = f32[8,16] convert(p0)
  t = f32[8,16] tanh(pw), metadata={op_name="@F/tanh"}, @C
  ROOT pn = bf16[8,16] convert(t)
}

tanh_bwd {
  r0 = bf16[8,16] parameter(0)
  rw = f32[8,16] convert(r0)
  rt = f32[8,16] tanh(rw), metadata={op_name="@R/tanh"}, @C
  ROOT rn = bf16[8,16] convert(rt)
}

gradient {
  g0 = bf16[8,16] parameter(0)
  g1 = bf16[8,16] parameter(1)
  gg = f32[8,16] convert(g0)
  one = bf16[] constant(1)
  ones = bf16[8,16] broadcast(one), dimensions={}, metadata={op_name="@R/sub"}
  onew = f32[8,16] convert(ones)
  gx = f32[8,16] convert(g1)
  gt = f32[8,16] tanh(gx), metadata={op_name="@R/tanh"}, @C
  gs = f32[8,16] @OP(onew, gt), metadata={op_name="@R/sub"}
  gm = f32[8,16] multiply(gg, gs), metadata={op_name="@B/mul"}
  gm2 = f32[8,16] multiply(gm, gt), metadata={op_name="@B/mul"}
  ga = f32[8,16] add(gm, gm2), metadata={op_name="@B/add_any"}
  ROOT gn = bf16[8,16] convert(ga)
}

bwd_cond {
  c = (s32[], bf16[8,16], bf16[8,16], bf16[16,8]) parameter(0)
  ci = s32[] get-tuple-element(c), index=0
  n = s32[] constant(2)
  ROOT lt = pred[] compare(ci, n), direction=LT
}

bwd_body {
  b = (s32[], bf16[8,16], bf16[8,16], bf16[16,8]) parameter(0)
  i = s32[] get-tuple-element(b), index=0
  x = bf16[8,16] get-tuple-element(b), index=1
  dy = bf16[8,16] get-tuple-element(b), index=2
  w = bf16[16,8] get-tuple-element(b), index=3
  t = bf16[8,16] fusion(x), kind=kLoop, calls=tanh_bwd
  dw = bf16[16,16] dot(t, dy), @G, metadata={op_name="@B/dense/transpose"}, @T
  dx = bf16[8,16] fusion(dy, x), kind=kLoop, calls=gradient
  k = s32[] constant(1)
  j = s32[] add(i, k)
  ROOT o = (s32[], bf16[8,16], bf16[8,16], bf16[16,8]) tuple(j, x, dx, w)
}

ENTRY main {
  x0 = bf16[8,16] parameter(0)
  dy = bf16[8,16] parameter(1)
  w = bf16[16,8] parameter(2)
  h = bf16[8,16] fusion(x0), kind=kLoop, calls=tanh_fwd
  y = bf16[8,8] dot(h, w), @D, metadata={op_name="@F/dense/dot_general"}, @T
  z = s32[] constant(0)
  s = (s32[], bf16[8,16], bf16[8,16], bf16[16,8]) tuple(z, x0, dy, w)
  l = (s32[], bf16[8,16], bf16[8,16], bf16[16,8]) while(s), condition=bwd_cond, body=bwd_body
  g = bf16[8,16] get-tuple-element(l), index=2
  ROOT out = (bf16[8,8], bf16[8,16]) tuple(y, g)
}
"""


def _parsed(op: str = "subtract", text: str = SCAN):
    """The module, its op_name prefixes written out: @F the forward, @R the checkpoint's
    recompute, @B its backward; @D a matmul's dimension numbers, @G a weight gradient's; @L the
    entry's layout and @T TPU's backend config (what makes it a TPU module), @C a type
    correction's; @OP the residual's op."""
    for short, long in (("@R", "jit(loss)/transpose(jvp())/while/body/checkpoint/rematted_computation"),
                        ("@B", "jit(loss)/transpose(jvp())/while/body/checkpoint"), ("@F", "jit(loss)/jvp()"),
                        ("@D", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
                        ("@G", "lhs_contracting_dims={0}, rhs_contracting_dims={0}"),
                        ("@L", "{(bf16[8,16]{1,0:T(8,128)(2,1)})->bf16[8,8]{1,0:T(8,128)(2,1)}}"),
                        ("@T", 'backend_config={"scoped_memory_configs":[]}'), ("@C", _CORRECTED), ("@OP", op)):
        text = text.replace(short, long)
    return hloparse.parse(text)


def test_the_twins_narrowed_one_minus_t_offsets_the_recomputes_converts():
    remat = find_remat(_parsed()).remat
    assert ("tanh_bwd", "rt") in remat
    assert not {("tanh_bwd", "rw"), ("tanh_bwd", "rn")} & remat


def test_only_a_residual_of_a_widened_narrow_constant():
    # An f32 constant: the program without remat's saving fusion widens nothing.
    wide = SCAN.replace("  one = bf16[] constant(1)\n  ones = bf16[8,16] broadcast(one)",
                        "  one = f32[] constant(1)\n  ones = f32[8,16] broadcast(one)")
    assert ("tanh_bwd", "rn") in find_remat(_parsed(text=wide)).remat
    # A product of two values: the residual reads no constant.
    assert ("tanh_bwd", "rn") in find_remat(_parsed(op="multiply")).remat
