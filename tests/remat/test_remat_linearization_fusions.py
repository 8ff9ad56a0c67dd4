"""A fusion computing only the linearization's own work that jax named in the recompute (softmax's
`s * s` and `1 / (s * s)`, the derivative of `1 / s`: no forward op is like them) is a fusion the
program without remat has too, reading its forward's `s` where this one reads the recompute's. So
what XLA copied into it runs in both programs: float normalization's widen of the recomputed `s`
there is model FLOPs, though its value equals the forward's widen of `s` (hloflops.remat.fusion_copies;
base draw 63, a bf16 LM under a whole-model `nn.remat`: one such widen per attention block was
counted, convert +64 of the +1,088 miss). The recompute's own widen of `s` stays remat.
Handwritten: no jax needed."""

from __future__ import annotations

import hloparse
from hloflops.accounting import account

FWD = "jit(loss)/jvp(LM)/block_0/attn"
REC = "jit(loss)/transpose(jvp(jvp()))/checkpoint/rematted_computation/LM/block_0/attn"
BWD = "jit(loss)/transpose(jvp(jvp()))/checkpoint/LM/block_0/attn"


def _m(name: str) -> str:
    return f'metadata={{op_name="{name}"}}'


TEXT = f"""
HloModule linearization_fusions, is_scheduled=true

add_f32 {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(a, b)
}}

forward_sum {{
  e = bf16[4,8]{{1,0}} parameter(0)
  ew = f32[4,8]{{1,0}} convert(e)
  z = f32[] constant(0)
  s = f32[4]{{0}} reduce(ew, z), dimensions={{1}}, to_apply=add_f32, {_m(FWD + "/reduce_sum")}
  ROOT sn = bf16[4]{{0}} convert(s)
}}

forward_div {{
  s = bf16[4]{{0}} parameter(0)
  e = bf16[4,8]{{1,0}} parameter(1)
  sw = f32[4]{{0}} convert(s)
  ew = f32[4,8]{{1,0}} convert(e)
  sb = f32[4,8]{{1,0}} broadcast(sw), dimensions={{0}}
  p = f32[4,8]{{1,0}} divide(ew, sb), {_m(FWD + "/div")}
  ROOT pn = bf16[4,8]{{1,0}} convert(p)
}}

recompute_sum {{
  e = bf16[4,8]{{1,0}} parameter(0)
  rew = f32[4,8]{{1,0}} convert(e)
  z = f32[] constant(0)
  rs = f32[4]{{0}} reduce(rew, z), dimensions={{1}}, to_apply=add_f32, {_m(REC + "/reduce_sum")}
  ROOT rsn = bf16[4]{{0}} convert(rs)
}}

recompute_div {{
  s = bf16[4]{{0}} parameter(0)
  e = bf16[4,8]{{1,0}} parameter(1)
  rsw = f32[4]{{0}} convert(s)
  rew2 = f32[4,8]{{1,0}} convert(e)
  rsb = f32[4,8]{{1,0}} broadcast(rsw), dimensions={{0}}
  rp = f32[4,8]{{1,0}} divide(rew2, rsb), {_m(REC + "/div")}
  ROOT rpn = bf16[4,8]{{1,0}} convert(rp)
}}

linearization {{
  s = bf16[4]{{0}} parameter(0)
  lw = f32[4]{{0}} convert(s)
  ss = f32[4]{{0}} multiply(lw, lw), {_m(REC + "/mul")}
  ssn = bf16[4]{{0}} convert(ss)
  ssw = f32[4]{{0}} convert(ssn)
  one = f32[] constant(1)
  ones = f32[4]{{0}} broadcast(one), dimensions={{}}
  inv = f32[4]{{0}} divide(ones, ssw), {_m(REC + "/div")}
  ROOT invn = bf16[4]{{0}} convert(inv)
}}

ENTRY main {{
  e = bf16[4,8]{{1,0}} parameter(0)
  g = bf16[4,8]{{1,0}} parameter(1)
  fs = bf16[4]{{0}} fusion(e), kind=kLoop, calls=forward_sum
  fp = bf16[4,8]{{1,0}} fusion(fs, e), kind=kLoop, calls=forward_div
  rs = bf16[4]{{0}} fusion(e), kind=kLoop, calls=recompute_sum
  rp = bf16[4,8]{{1,0}} fusion(rs, e), kind=kLoop, calls=recompute_div
  li = bf16[4]{{0}} fusion(rs), kind=kLoop, calls=linearization
  gp = bf16[4,8]{{1,0}} multiply(g, rp), {_m(BWD + "/mul")}
  lb = bf16[4,8]{{1,0}} broadcast(li), dimensions={{0}}
  gs = bf16[4,8]{{1,0}} multiply(gp, lb), {_m(BWD + "/mul_s")}
  ROOT out = (bf16[4,8]{{1,0}}, bf16[4,8]{{1,0}}) tuple(fp, gs)
}}
"""


def _flags():
    acc = account(hloparse.parse(TEXT), xla={"flops": 0.0})
    return {r.name for r in acc.rows if r.remat}, acc


def test_a_widen_in_a_fusion_of_the_linearizations_own_work_is_model_flops():
    remat, _ = _flags()
    assert "lw" not in remat, remat
    assert not {"ss", "inv"} & remat, remat  # the linearization's own work


def test_the_recompute_and_its_own_widens_stay_remat():
    remat, acc = _flags()
    assert {"rs", "rp"} <= remat, remat
    # One widen of `s` beyond the program without remat's: the module is a checkpoint around the
    # whole model (the recompute reads only program inputs, the forward hands nothing to the
    # backward), so it is the forward's own (`sw`), the recompute's `rsw` standing for the program
    # without remat's forward (hloflops.remat.whole_checkpoint_widens).
    assert len({"sw", "rsw"} & remat) == 1 and "sw" in remat, remat
    low, high = acc.remat_flops_bounds
    assert low <= acc.remat_flops <= high
