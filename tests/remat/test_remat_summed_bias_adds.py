"""A recomputed bias add fused into its recomputed matmul's fusion, where the forward adds the bias to
a product summed across devices (an fsdp matmul whose contracted dimension is split: its partial
products all-reduced): analysis/hloflops/remat/saved_apart.py `fused_into_matmul`, asked by
backward_loop_copies.

No fusion holds both an all-reduce and what reads it, so the add is no matmul fusion's epilogue in
the program without remat either: XLA copies it into the fusions reading the sum, the next matmul's
operand fusion and the saving fusion's `add -> tanh -> 1 - tanh` (xtpu 412, haiku layer stack tanh
under fsdp: add +192 counted sure, the truth below the range). The recompute's add, reading a matmul
computed in its fusion, has no forward op of its value number; the forward's bias adds of its shape
stand for it, those its name inside the checkpoint names (`linear`, not the next layer's
`linear_1`, whose add XLA fused into its matmul's fusion). Hand-written after that draw:
`fwd_act` adds the bias to the all-reduced product, `fwd_next` is the next layer's matmul with its
add fused in, `bwd_rec` recomputes the matmul and its bias add and reads tanh's `h * h` (`@R`) for
the gradient (`@B`).
"""

from __future__ import annotations

from hloflops.remat import find_remat
from tests.remat.test_remat_windowed_bias_adds import _parsed

SCAN = """HloModule scan_summed, is_scheduled=true, entry_computation_layout=@L

sum {
  s0 = f32[] parameter(0)
  s1 = f32[] parameter(1)
  ROOT s2 = f32[] add(s0, s1)
}

fwd_act {
  a0 = f32[8,16] parameter(0)
  a1 = f32[16] parameter(1)
  ab = f32[8,16] broadcast(a1), dimensions={1}, metadata={op_name="@F/linear/add"}
  ah = f32[8,16] add(a0, ab), metadata={op_name="@F/linear/add"}
  as = f32[8,16] multiply(ah, ah), metadata={op_name="@F/integer_pow"}
  ROOT ay = f32[8,16] multiply(ah, as), metadata={op_name="@F/mul"}
}

fwd_next {
  n0 = f32[8,16] parameter(0)
  n1 = f32[16,16] parameter(1)
  n2 = f32[16] parameter(2)
  nd = f32[8,16] dot(n0, n1), @D, metadata={op_name="@F/linear_1/dot_general"}
  nb = f32[8,16] broadcast(n2), dimensions={1}, metadata={op_name="@F/linear_1/add"}
  ROOT nh = f32[8,16] add(nd, nb), metadata={op_name="@F/linear_1/add"}
}

bwd_rec {
  r0 = f32[8,32] parameter(0)
  r1 = f32[32,16] parameter(1)
  r2 = f32[16] parameter(2)
  r3 = f32[8,16] parameter(3)
  rd = f32[8,16] dot(r0, r1), @D, metadata={op_name="@R/linear/dot_general"}
  rb = f32[8,16] broadcast(r2), dimensions={1}, metadata={op_name="@R/linear/add"}
  rh = f32[8,16] add(rd, rb), metadata={op_name="@R/linear/add"}
  rs = f32[8,16] multiply(rh, rh), metadata={op_name="@R/integer_pow"}
  ROOT rg = f32[8,16] multiply(r3, rs), metadata={op_name="@B/mul"}
}

fwd_cond {
  fc = (s32[], f32[8,16], f32[16], f32[8,16], f32[16,16]) parameter(0)
  fci = s32[] get-tuple-element(fc), index=0
  fn = s32[] constant(2)
  ROOT flt = pred[] compare(fci, fn), direction=LT
}

fwd_body {
  fp = (s32[], f32[8,16], f32[16], f32[8,16], f32[16,16]) parameter(0)
  fi = s32[] get-tuple-element(fp), index=0
  fx = f32[8,16] get-tuple-element(fp), index=1
  fb = f32[16] get-tuple-element(fp), index=2
  fw = f32[16,16] get-tuple-element(fp), index=4
  wy = f32[8,16] all-reduce(fx), replica_groups={}, to_apply=sum, metadata={op_name="@F/linear/dot_general"}
  fy = f32[8,16] fusion(wy, fb), kind=kLoop, calls=fwd_act, @T
  fz = f32[8,16] fusion(fy, fw, fb), kind=kOutput, calls=fwd_next, @T
  fk = s32[] constant(1)
  fj = s32[] add(fi, fk)
  ROOT fo = (s32[], f32[8,16], f32[16], f32[8,16], f32[16,16]) tuple(fj, fx, fb, fz, fw)
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
  v0 = f32[16,16] parameter(5)
  z = s32[] constant(0)
  fs = (s32[], f32[8,16], f32[16], f32[8,16], f32[16,16]) tuple(z, p0, b0, g0, v0)
  fl = (s32[], f32[8,16], f32[16], f32[8,16], f32[16,16]) while(fs), condition=fwd_cond, body=fwd_body
  y = f32[8,16] get-tuple-element(fl), index=3
  s = (s32[], f32[8,32], f32[32,16], f32[16], f32[8,16]) tuple(z, x0, w0, b0, g0)
  l = (s32[], f32[8,32], f32[32,16], f32[16], f32[8,16]) while(s), condition=bwd_cond, body=bwd_body
  gl = f32[8,16] get-tuple-element(l), index=4
  ROOT out = (f32[8,16], f32[8,16]) tuple(y, gl)
}
"""


def test_a_recomputed_bias_add_whose_forward_reads_an_all_reduce_has_the_twins_saving_copy():
    index = find_remat(_parsed(SCAN))
    assert ("bwd_rec", "rh") not in index


def test_alone_the_bias_add_on_an_all_reduce_has_the_twins_saving_copy_too():
    # Without the next layer's add of the same shape: the sum across devices alone decides.
    alone = SCAN.replace("  fz = f32[8,16] fusion(fy, fw, fb), kind=kOutput, calls=fwd_next, @T\n", "") \
                .replace("tuple(fj, fx, fb, fz, fw)", "tuple(fj, fx, fb, fy, fw)")
    index = find_remat(_parsed(alone))
    assert ("bwd_rec", "rh") not in index


def test_a_recomputed_bias_add_named_as_the_layer_whose_add_is_fused_into_its_matmul_stays_remat():
    # The recompute names the next layer (`linear_1`), whose forward add reads its matmul in its
    # fusion: the program without remat stores the sum from there, no saving copy.
    renamed = SCAN.replace('op_name="@R/linear/', 'op_name="@R/linear_1/')
    index = find_remat(_parsed(renamed))
    assert ("bwd_rec", "rh") in index
