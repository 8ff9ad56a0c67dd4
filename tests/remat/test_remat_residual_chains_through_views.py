"""The chain of a residual the program without remat saves, followed through views that are no ops
of the pairing (analysis/hloflops/remat/backward_loop_copies.py `_saved_chains`), in a TPU scan's
backward loop.

A layer norm's gradient reads `-0.5 * r / v` (`v = var / n + eps`, `r = rsqrt(v)`), which only the
linearization computes: the program without remat saves it, computing `v` and `r` again in its
saving fusion. TPU computes `r` on `[1, 128, 1]` between bitcasts of `[128]` values, and the
bitcasts are not ops the pairing numbers: the walk down the residual's chain stopped at them, so
`v / n + eps` was on no residual's chain, with no saving copy, and both backward copies of it
(the recompute handing out `r`, and the coefficient's gradient fusion) were counted as remat (utpu
215 and vtpu 299, hk.layer_stack attention: add and multiply +512 each, one `[128]` copy per layer
norm). Hand-written after utpu 215: `stat_r` hands out `r`, `coef_g` computes the coefficient's
gradient, `stat_f` is the forward's `r`.
"""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat

SCAN = """HloModule scan_norm, is_scheduled=true, entry_computation_layout=@L

stat_f {
  f0 = f32[128] parameter(0)
  fc = f32[] constant(0.03125)
  fb = f32[128] broadcast(fc), dimensions={}
  fm = f32[128] multiply(f0, fb), metadata={op_name="@F/layer_norm/jit(_var)/div"}
  fe = f32[] constant(1e-06)
  fbe = f32[128] broadcast(fe), dimensions={}
  fa = f32[128] add(fm, fbe), metadata={op_name="@F/layer_norm/add"}
  ROOT fr = f32[128] rsqrt(fa), metadata={op_name="@F/layer_norm/rsqrt"}
}

stat_r {
  s0 = f32[128] parameter(0)
  sc = f32[] constant(0.03125)
  sb = f32[128] broadcast(sc), dimensions={}, metadata={op_name="@R/layer_norm/jit(_var)/div"}
  sm = f32[128] multiply(s0, sb), metadata={op_name="@R/layer_norm/jit(_var)/div"}
  se = f32[] constant(1e-06)
  sbe = f32[128] broadcast(se), dimensions={}
  sa = f32[128] add(sm, sbe), metadata={op_name="@R/layer_norm/add"}
  sv = f32[1,128,1] bitcast(sa), metadata={op_name="@R/layer_norm/add"}
  sr = f32[1,128,1] rsqrt(sv), metadata={op_name="@R/layer_norm/rsqrt"}
  ROOT so = f32[128] bitcast(sr)
}

coef_g {
  k0 = f32[128] parameter(0)
  k1 = f32[128] parameter(1)
  kc = f32[] constant(0.03125)
  kb = f32[128] broadcast(kc), dimensions={}, metadata={op_name="@R/layer_norm/jit(_var)/div"}
  km = f32[128] multiply(k1, kb), metadata={op_name="@R/layer_norm/jit(_var)/div"}
  ke = f32[] constant(1e-06)
  kbe = f32[128] broadcast(ke), dimensions={}
  ka = f32[128] add(km, kbe), metadata={op_name="@R/layer_norm/add"}
  kv = f32[1,128,1] bitcast(ka), metadata={op_name="@R/layer_norm/add"}
  kr = f32[1,128,1] rsqrt(kv), metadata={op_name="@R/layer_norm/rsqrt"}
  kd = f32[1,128,1] divide(kr, kv), metadata={op_name="@R/layer_norm/div"}
  kh = f32[] constant(-0.5)
  kbh = f32[1,128,1] broadcast(kh), dimensions={}
  kn = f32[1,128,1] multiply(kd, kbh), metadata={op_name="@R/layer_norm/mul"}
  kg = f32[1,128,1] bitcast(k0)
  kx = f32[1,128,1] multiply(kg, kn), metadata={op_name="@B/layer_norm/mul"}
  ROOT ko = f32[128] bitcast(kx)
}

fwd_cond {
  fc0 = (s32[], f32[128], f32[128]) parameter(0)
  fci = s32[] get-tuple-element(fc0), index=0
  fn = s32[] constant(2)
  ROOT flt = pred[] compare(fci, fn), direction=LT
}

fwd_body {
  fp = (s32[], f32[128], f32[128]) parameter(0)
  fi = s32[] get-tuple-element(fp), index=0
  fv = f32[128] get-tuple-element(fp), index=1
  rf = f32[128] fusion(fv), kind=kLoop, calls=stat_f, @T
  fk = s32[] constant(1)
  fj = s32[] add(fi, fk)
  ROOT fo = (s32[], f32[128], f32[128]) tuple(fj, fv, rf)
}

bwd_cond {
  c = (s32[], f32[128], f32[128], f32[128]) parameter(0)
  ci = s32[] get-tuple-element(c), index=0
  n = s32[] constant(2)
  ROOT lt = pred[] compare(ci, n), direction=LT
}

bwd_body {
  b = (s32[], f32[128], f32[128], f32[128]) parameter(0)
  i = s32[] get-tuple-element(b), index=0
  v = f32[128] get-tuple-element(b), index=1
  g = f32[128] get-tuple-element(b), index=2
  acc = f32[128] get-tuple-element(b), index=3
  r = f32[128] fusion(v), kind=kLoop, calls=stat_r
  dg = f32[128] fusion(g, v), kind=kLoop, calls=coef_g
  d = f32[128] multiply(r, dg), metadata={op_name="@B/layer_norm/mul"}
  k = s32[] constant(1)
  j = s32[] add(i, k)
  ROOT o = (s32[], f32[128], f32[128], f32[128]) tuple(j, v, d, acc)
}

ENTRY main {
  v0 = f32[128] parameter(0)
  g0 = f32[128] parameter(1)
  z = s32[] constant(0)
  fs = (s32[], f32[128], f32[128]) tuple(z, v0, v0)
  fl = (s32[], f32[128], f32[128]) while(fs), condition=fwd_cond, body=fwd_body
  rf = f32[128] get-tuple-element(fl), index=2
  s = (s32[], f32[128], f32[128], f32[128]) tuple(z, v0, g0, rf)
  l = (s32[], f32[128], f32[128], f32[128]) while(s), condition=bwd_cond, body=bwd_body
  gl = f32[128] get-tuple-element(l), index=2
  ROOT out = (f32[128], f32[128]) tuple(rf, gl)
}
"""


def _parsed():
    """@F the forward, @R the checkpoint's recompute, @B its backward; @L the entry's layout and
    @T TPU's backend config (what makes it a TPU module)."""
    text = SCAN
    for short, long in (("@R", "jit(loss)/transpose(jvp())/while/body/checkpoint/rematted_computation"),
                        ("@B", "jit(loss)/transpose(jvp())/while/body/checkpoint"), ("@F", "jit(loss)/jvp()"),
                        ("@L", "{(f32[128]{0:T(128)})->f32[128]{0:T(128)}}"),
                        ("@T", 'backend_config={"scoped_memory_configs":[]}')):
        text = text.replace(short, long)
    return hloparse.parse(text)


def test_a_value_under_a_bitcast_on_a_saved_residuals_chain_has_its_saving_copy():
    # `v / n + eps` in both backward fusions: one copy is the saving fusion's (the twin computes
    # `-0.5 * r / v` to save it), the other runs because of remat.
    index = find_remat(_parsed())
    counted = [name for comp, name in (("stat_r", "sa"), ("coef_g", "ka")) if (comp, name) in index]
    assert len(counted) == 1
