"""A recompute of softmax's statistics that reads the saved scores with a unit dimension the
forward's lack (analysis/hloflops/remat/unit_dimension_forwards.py). Under `dots_saveable` a scan's
backward loop reads the attention scores back from the forward loop's stack in jax's shape, one
head per device: `[b, 1, k]` here. The recompute scales them (`@R/div`, copied into both fusions,
`max_r` and `sum_r`) and takes their max and sum; the forward loop's fusions compute the same off
`[b, k]`. The scaling's copies number the same value and no forward op does (other inputs, other
shapes), so the first copy is kept as model FLOPs as a linearization coefficient's would be, and
the reduces reading it were taken for values derived from a coefficient, the first of each model
FLOPs: TPU utpu 183 (reduce -11,904), ntpu 131 (-7,200). XLA never duplicates a reduce, and the
program without remat, which stores the probabilities, runs no max or sum of them in its backward:
both recomputed reduces are remat."""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat

HLO = """HloModule softmax_stack, is_scheduled=true, entry_computation_layout=@L

max_c {
  ma = f32[] parameter(0)
  mb = f32[] parameter(1)
  ROOT mm = f32[] maximum(ma, mb)
}

add_c {
  aa = f32[] parameter(0)
  ab = f32[] parameter(1)
  ROOT as = f32[] add(aa, ab)
}

max_f {
  f0 = f32[2,8] parameter(0)
  fc = f32[] constant(0.5)
  fbc = f32[2,8] broadcast(fc), dimensions={}
  fsc = f32[2,8] multiply(f0, fbc), metadata={op_name="@F/attn/div"}
  fninf = f32[] constant(-inf)
  ROOT fmax = f32[2] reduce(fsc, fninf), dimensions={1}, to_apply=max_c, metadata={op_name="@F/attn/reduce_max"}
}

sum_f {
  g0 = f32[2,8] parameter(0)
  g1 = f32[2] parameter(1)
  gc = f32[] constant(0.5)
  gbc = f32[2,8] broadcast(gc), dimensions={}
  gsc = f32[2,8] multiply(g0, gbc), metadata={op_name="@F/attn/div"}
  gbm = f32[2,8] broadcast(g1), dimensions={0}
  gd = f32[2,8] subtract(gsc, gbm), metadata={op_name="@F/attn/sub"}
  ge = f32[2,8] exponential(gd), metadata={op_name="@F/attn/exp"}
  gz = f32[] constant(0)
  ROOT gsum = f32[2] reduce(ge, gz), dimensions={1}, to_apply=add_c, metadata={op_name="@F/attn/reduce_sum"}
}

fwd_body {
  fp = (s32[], f32[2,8], f32[2]) parameter(0)
  fi = s32[] get-tuple-element(fp), index=0
  fx = f32[2,8] get-tuple-element(fp), index=1
  fm = f32[2] fusion(fx), kind=kLoop, calls=max_f
  fs = f32[2] fusion(fx, fm), kind=kLoop, calls=sum_f
  fone = s32[] constant(1)
  fn = s32[] add(fi, fone)
  ROOT fo = (s32[], f32[2,8], f32[2]) tuple(fn, fx, fs)
}

fwd_cond {
  fcp = (s32[], f32[2,8], f32[2]) parameter(0)
  fci = s32[] get-tuple-element(fcp), index=0
  fcn = s32[] constant(3)
  ROOT flt = pred[] compare(fci, fcn), direction=LT
}

max_r {
  r0 = f32[2,1,8] parameter(0)
  rc = f32[] constant(0.5)
  rbc = f32[2,1,8] broadcast(rc), dimensions={}
  rsc = f32[2,1,8] multiply(r0, rbc), metadata={op_name="@R/attn/div"}
  rninf = f32[] constant(-inf)
  ROOT rmax = f32[2] reduce(rsc, rninf), dimensions={1,2}, to_apply=max_c, metadata={op_name="@R/attn/reduce_max"}
}

sum_r {
  q0 = f32[2,1,8] parameter(0)
  q1 = f32[2] parameter(1)
  qc = f32[] constant(0.5)
  qbc = f32[2,1,8] broadcast(qc), dimensions={}
  qsc = f32[2,1,8] multiply(q0, qbc), metadata={op_name="@R/attn/div"}
  qbm = f32[2,1,8] broadcast(q1), dimensions={0}, metadata={op_name="@R/attn/sub"}
  qd = f32[2,1,8] subtract(qsc, qbm), metadata={op_name="@R/attn/sub"}
  qe = f32[2,1,8] exponential(qd), metadata={op_name="@R/attn/exp"}
  qz = f32[] constant(0)
  ROOT qsum = f32[2] reduce(qe, qz), dimensions={1,2}, to_apply=add_c, metadata={op_name="@R/attn/reduce_sum"}
}

bwd_body {
  bp = (s32[], f32[2,1,8], f32[2]) parameter(0)
  bi = s32[] get-tuple-element(bp), index=0
  bx = f32[2,1,8] get-tuple-element(bp), index=1
  bm = f32[2] fusion(bx), kind=kLoop, calls=max_r
  bs = f32[2] fusion(bx, bm), kind=kLoop, calls=sum_r
  bone = s32[] constant(1)
  bn = s32[] add(bi, bone)
  ROOT bo = (s32[], f32[2,1,8], f32[2]) tuple(bn, bx, bs)
}

bwd_cond {
  bcp = (s32[], f32[2,1,8], f32[2]) parameter(0)
  bci = s32[] get-tuple-element(bcp), index=0
  bcn = s32[] constant(3)
  ROOT blt = pred[] compare(bci, bcn), direction=LT
}

ENTRY main {
  x = f32[2,8] parameter(0)
  zero = s32[] constant(0)
  z = f32[2] constant({0, 0})
  fin = (s32[], f32[2,8], f32[2]) tuple(zero, x, z)
  fw = (s32[], f32[2,8], f32[2]) while(fin), condition=fwd_cond, body=fwd_body, @T
  sums = f32[2] get-tuple-element(fw), index=2
  stacked = f32[2,1,8] parameter(1)
  bin = (s32[], f32[2,1,8], f32[2]) tuple(zero, stacked, sums)
  bw = (s32[], f32[2,1,8], f32[2]) while(bin), condition=bwd_cond, body=bwd_body
  ROOT out = f32[2] get-tuple-element(bw), index=2
}
"""

REDUCES = [("max_r", "rmax"), ("sum_r", "qsum")]


def _parsed(text: str):
    """@F the forward loop's names, @R the recompute's in the backward loop; @L the entry's layout
    and @T TPU's backend config (what makes it a TPU module)."""
    for short, long in (("@R", "jit(loss)/transpose(jvp())/while/body/closed_call/checkpoint/rematted_computation"),
                        ("@F", "jit(loss)/jvp()/while/body/closed_call"),
                        ("@L", "{(f32[2,8]{1,0:T(2,128)}, f32[2,1,8]{2,1,0:T(2,128)})->f32[2]{0:T(128)}}"),
                        ("@T", 'backend_config={"scoped_memory_configs":[]}')):
        text = text.replace(short, long)
    return hloparse.parse(text)


def test_recomputed_softmax_statistics_over_scores_with_a_unit_dimension_are_remat():
    index = find_remat(_parsed(HLO))
    assert all(key in index for key in REDUCES), sorted(index.remat)


def test_a_scale_the_forward_does_not_apply_keeps_the_reduces_as_before():
    # The forward scales by another constant: no forward op computes the recompute's scaled
    # scores, so they may be the linearization's own and the reduces derived from them.
    text = HLO.replace("fc = f32[] constant(0.5)", "fc = f32[] constant(0.25)").replace(
        "gc = f32[] constant(0.5)", "gc = f32[] constant(0.25)")
    index = find_remat(_parsed(text))
    assert not all(key in index for key in REDUCES), sorted(index.remat)
