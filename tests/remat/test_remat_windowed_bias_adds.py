"""A recomputed bias add fused into its recomputed matmul's fusion, where the forward adds the bias to
a product its fusion reads from outside (a tensor-parallel windowed einsum's loop output):
analysis/hloflops/remat/saved_apart.py `fused_into_matmul`, asked by backward_loop_copies.

The program without remat computes such a bias add wherever the product is read (XLA fuses nothing
into the windowed loop), its fusion saving gelu's residuals included: one saving copy, as the
recompute's own copy here, unsure where the forward computes the value (a twin that saves from its
forward's own fusion makes none). The recompute's add, reading a matmul computed in its fusion, has
no forward op of its value number, and the rule took the matmul's own output fusion for the twin's
(no saving copy): ntpu 138, nnx.scan gelu under tensor parallelism, add +256 counted sure, the twin
computing the bias add in its saving fusion and in the next matmul's operand fusion. The forward's
bias adds of the recompute's shape stand for its value: each reads a loop's output, so the saving
copy is the twin's, a hinge (not where the forward's add reads a product materialized apart for
another reason, an offload policy's copy to the host: ntpu 144 keeps its count). Hand-written
after that draw: `win_body` stands for the windowed loop, `fwd_act` adds the bias to its product,
`bwd_rec` recomputes the matmul and its bias add and reads gelu's `h * h` (`@R`) for the gradient
(`@B`).
"""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat

SCAN = """HloModule scan_windowed, is_scheduled=true, entry_computation_layout=@L

fwd_act {
  a0 = f32[8,16] parameter(0)
  a1 = f32[16] parameter(1)
  ab = f32[8,16] broadcast(a1), dimensions={1}, metadata={op_name="@F/add"}
  ah = f32[8,16] add(a0, ab), metadata={op_name="@F/add"}
  as = f32[8,16] multiply(ah, ah), metadata={op_name="@F/integer_pow"}
  ROOT ay = f32[8,16] multiply(ah, as), metadata={op_name="@F/mul"}
}

bwd_rec {
  r0 = f32[8,32] parameter(0)
  r1 = f32[32,16] parameter(1)
  r2 = f32[16] parameter(2)
  r3 = f32[8,16] parameter(3)
  rd = f32[8,16] dot(r0, r1), @D, metadata={op_name="@R/dot_general"}
  rb = f32[8,16] broadcast(r2), dimensions={1}, metadata={op_name="@R/add"}
  rh = f32[8,16] add(rd, rb), metadata={op_name="@R/add"}
  rs = f32[8,16] multiply(rh, rh), metadata={op_name="@R/integer_pow"}
  ROOT rg = f32[8,16] multiply(r3, rs), metadata={op_name="@B/mul"}
}

win_cond {
  wc = (s32[], f32[8,16]) parameter(0)
  wci = s32[] get-tuple-element(wc), index=0
  wn = s32[] constant(2)
  ROOT wlt = pred[] compare(wci, wn), direction=LT
}

win_body {
  wp = (s32[], f32[8,16]) parameter(0)
  wi = s32[] get-tuple-element(wp), index=0
  wx = f32[8,16] get-tuple-element(wp), index=1
  wk = s32[] constant(1)
  wj = s32[] add(wi, wk)
  ROOT wo = (s32[], f32[8,16]) tuple(wj, wx)
}

fwd_cond {
  fc = (s32[], f32[8,16], f32[16], f32[8,16]) parameter(0)
  fci = s32[] get-tuple-element(fc), index=0
  fn = s32[] constant(2)
  ROOT flt = pred[] compare(fci, fn), direction=LT
}

fwd_body {
  fp = (s32[], f32[8,16], f32[16], f32[8,16]) parameter(0)
  fi = s32[] get-tuple-element(fp), index=0
  fx = f32[8,16] get-tuple-element(fp), index=1
  fb = f32[16] get-tuple-element(fp), index=2
  ws = (s32[], f32[8,16]) tuple(fi, fx)
  wl = (s32[], f32[8,16]) while(ws), condition=win_cond, body=win_body, metadata={op_name="@F/dot_general"}
  wy = f32[8,16] get-tuple-element(wl), index=1
  fy = f32[8,16] fusion(wy, fb), kind=kLoop, calls=fwd_act, @T
  fk = s32[] constant(1)
  fj = s32[] add(fi, fk)
  ROOT fo = (s32[], f32[8,16], f32[16], f32[8,16]) tuple(fj, fx, fb, fy)
}

bwd_cond {
  c = (s32[], f32[8,32], f32[32,16], f32[16], f32[8,16]) parameter(0)
  ci = s32[] get-tuple-element(c), index=0
  n = s32[] constant(2)
  ROOT lt = pred[] compare(ci, n), direction=LT
}

bwd_body {
  b = (s32[], f32[8,32], f32[32,16], f32[16], f32[8,16]) parameter(0)
  i = s32[] get-tuple-element(b), index=0
  x = f32[8,32] get-tuple-element(b), index=1
  w = f32[32,16] get-tuple-element(b), index=2
  bias = f32[16] get-tuple-element(b), index=3
  g = f32[8,16] get-tuple-element(b), index=4
  dg = f32[8,16] fusion(x, w, bias, g), kind=kOutput, calls=bwd_rec
  k = s32[] constant(1)
  j = s32[] add(i, k)
  ROOT o = (s32[], f32[8,32], f32[32,16], f32[16], f32[8,16]) tuple(j, x, w, bias, dg)
}

ENTRY main {
  x0 = f32[8,32] parameter(0)
  w0 = f32[32,16] parameter(1)
  b0 = f32[16] parameter(2)
  g0 = f32[8,16] parameter(3)
  p0 = f32[8,16] parameter(4)
  z = s32[] constant(0)
  fs = (s32[], f32[8,16], f32[16], f32[8,16]) tuple(z, p0, b0, g0)
  fl = (s32[], f32[8,16], f32[16], f32[8,16]) while(fs), condition=fwd_cond, body=fwd_body
  y = f32[8,16] get-tuple-element(fl), index=3
  s = (s32[], f32[8,32], f32[32,16], f32[16], f32[8,16]) tuple(z, x0, w0, b0, g0)
  l = (s32[], f32[8,32], f32[32,16], f32[16], f32[8,16]) while(s), condition=bwd_cond, body=bwd_body
  gl = f32[8,16] get-tuple-element(l), index=4
  ROOT out = (f32[8,16], f32[8,16]) tuple(y, gl)
}
"""


def _parsed(text: str = SCAN):
    """@F the forward, @R the checkpoint's recompute, @B its backward; @D a matmul's dimension
    numbers, @L the entry's layout and @T TPU's backend config (what makes it a TPU module)."""
    for short, long in (("@R", "jit(loss)/transpose(jvp())/while/body/checkpoint/rematted_computation"),
                        ("@B", "jit(loss)/transpose(jvp())/while/body/checkpoint"),
                        ("@F", "jit(loss)/jvp()/while/body"),
                        ("@D", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
                        ("@L", "{(f32[8,32]{1,0:T(8,128)})->f32[8,16]{1,0:T(8,128)}}"),
                        ("@T", 'backend_config={"scoped_memory_configs":[]}')):
        text = text.replace(short, long)
    return hloparse.parse(text)


def test_a_recomputed_bias_add_whose_forward_reads_a_loops_product_has_the_twins_saving_copy():
    index = find_remat(_parsed())
    assert ("bwd_rec", "rh") not in index


def test_a_recomputed_bias_add_whose_forward_reads_a_matmul_stays_remat():
    # The forward's add reads its matmul's output in its fusion: the program without remat stores
    # the sum from that fusion, no saving copy, and the recompute's add runs because of remat.
    with_matmul = SCAN.replace("  ah = f32[8,16] add(a0, ab)",
                               "  aw = f32[16,16] broadcast(a1), dimensions={1}\n"
                               "  am = f32[8,16] dot(a0, aw), @D, metadata={op_name=\"@F/dot_general\"}\n"
                               "  ah = f32[8,16] add(am, ab)")
    index = find_remat(_parsed(with_matmul))
    assert ("bwd_rec", "rh") in index
