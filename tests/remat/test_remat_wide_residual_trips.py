"""Residuals a scan's backward loop recomputes wide in its gradient fusion, which the program
without remat stores in bf16 stacks (hloflops.remat.wide_residual_trips): on TPU the gradient
fusion of a bf16 program recomputes tanh's `t` and `1 - t` in f32 from a widened input and reads
them wide; the program without remat narrows each residual into its stack in its forward loop and
widens the slice it reads back in its gradient fusion. Two converts per residual and trip that
this program never runs: a `twin_copies` hinge on a convert of the fusion, lowering the range's
low end only.

Hand-written after TPU draw 29 of the generator (linen_remat_scan LM in bf16 with gelu under
tensor parallelism: five gelu residuals read wide in one gradient fusion, convert truth -23,776
against +90,112 counted, the range's low end 40,416 above the truth).
"""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat

SCAN = """HloModule scan_tanh, is_scheduled=true, entry_computation_layout=@L

tanh_fwd {
  p0 = bf16[8,16] parameter(0)
  pw = f32[8,16] convert(p0)
  t = f32[8,16] tanh(pw), metadata={op_name="@F/tanh"}
  ROOT pn = bf16[8,16] convert(t)
}

gradient {
  g0 = bf16[8,16] parameter(0)
  g1 = bf16[8,16] parameter(1)
  gg = f32[8,16] convert(g0)
  one = bf16[] constant(1)
  ones = bf16[8,16] broadcast(one), dimensions={}, metadata={op_name="@R/sub"}
  onew = f32[8,16] convert(ones)
  gx = f32[8,16] @WIDEN(g1)
  gt = f32[8,16] tanh(gx), metadata={op_name="@R/tanh"}
  gs = f32[8,16] subtract(onew, gt), metadata={op_name="@R/sub"}
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

# float normalization's widen (unnamed), and jax's own upcast (named: an f32 value to jax).
_NORMALIZED = "convert"
_UPCAST = 'convert(g1), metadata={op_name="@R/convert_element_type"}'


def _parsed(widen: str = _NORMALIZED, text: str = SCAN):
    """The module, its op_name prefixes written out: @F the forward, @R the checkpoint's
    recompute, @B its backward; @D, @G a matmul's and a weight gradient's dimension numbers, @L
    the entry's layout and @T TPU's backend config (what makes it a TPU module); @WIDEN the
    recompute's widen of its input."""
    text = text.replace("@WIDEN(g1)", widen if widen != _NORMALIZED else "convert(g1)")
    for short, long in (("@R", "jit(loss)/transpose(jvp())/while/body/checkpoint/rematted_computation"),
                        ("@B", "jit(loss)/transpose(jvp())/while/body/checkpoint"), ("@F", "jit(loss)/jvp()"),
                        ("@D", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
                        ("@G", "lhs_contracting_dims={0}, rhs_contracting_dims={0}"),
                        ("@L", "{(bf16[8,16]{1,0:T(8,128)(2,1)})->bf16[8,8]{1,0:T(8,128)(2,1)}}"),
                        ("@T", 'backend_config={"scoped_memory_configs":[]}')):
        text = text.replace(short, long)
    return hloparse.parse(text)


def _trips(index) -> int:
    return sum(n for key, n in index.twin_copies.items() if key[0] == "gradient")


def test_two_converts_of_the_twins_stack_per_residual_read_wide():
    # `t` and `1 - t`, read wide by the gradient's products: narrowed into the twin's stacks and
    # widened back, two each, on a convert of their size in the gradient fusion.
    index = find_remat(_parsed())
    assert _trips(index) == 4
    carrier = next(key for key in index.twin_copies if key[0] == "gradient")
    assert carrier[1] in {"gg", "onew", "gx", "gn"}


def test_no_trips_for_a_value_jax_computes_in_f32():
    # jax's own upcast and an f32 constant: the values are f32 to jax, and the program without
    # remat stores them in f32.
    f32 = SCAN.replace("  one = bf16[] constant(1)\n  ones = bf16[8,16] broadcast(one)",
                       "  one = f32[] constant(1)\n  ones = f32[8,16] broadcast(one)") \
        .replace("onew = f32[8,16] convert(ones)", "onew = f32[8,16] copy(ones)")
    assert _trips(find_remat(_parsed(widen=_UPCAST, text=f32))) == 0
    # One of them widened by float normalization: `1 - t` is bf16 to jax, `t` is not.
    assert _trips(find_remat(_parsed(widen=_UPCAST))) == 2


def test_no_trips_before_optimization():
    unscheduled = SCAN.replace(", is_scheduled=true", "")
    assert _trips(find_remat(_parsed(text=unscheduled))) == 0


_GRADIENT_CALL = "  dx = bf16[8,16] fusion(dy, x), kind=kLoop, calls=gradient\n"


def test_no_trips_for_a_residual_this_program_narrows_too():
    # The recompute hands `t` out narrowed for the weight's gradient too (TPU draw 37): the stack's
    # narrow has its counterpart here, and `1 - t` is saved_residual_narrows' to settle.
    narrowed = SCAN.replace("gradient {", """tanh_bwd {
  r0 = bf16[8,16] parameter(0)
  rw = f32[8,16] convert(r0)
  rt = f32[8,16] tanh(rw), metadata={op_name="@R/tanh"}
  ROOT rn = bf16[8,16] convert(rt)
}

gradient {""").replace(_GRADIENT_CALL, """  t = bf16[8,16] fusion(x), kind=kLoop, calls=tanh_bwd
  dw = bf16[16,16] dot(t, dy), @G, metadata={op_name="@B/dense/transpose"}
  dx = bf16[8,16] fusion(dy, x), kind=kLoop, calls=gradient
""")
    assert _trips(find_remat(_parsed(text=narrowed))) == 0
