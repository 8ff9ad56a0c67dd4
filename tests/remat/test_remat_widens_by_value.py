"""Float normalization's widens counted value by value (hloflops.remat.widen_counts) where the
value has no name of its own that tells it from another: a program input (the first layer's input,
read by the forward's and the recompute's residual adds), and a recompute named by its primitive
alone (a model without module scopes, `.../rematted_computation/tanh`), whose value number is the
forward's in one frame (a Python loop's layers). Of the recompute fusions' widens of such a value,
as many as the forward's fusions widen it run because of remat, the rest are the program without
remat's too. And a recompute fusion that hands its value out narrowed under the checkpoint
primitive's own name (`.../remat2`, the value crossing a nested checkpoint's barrier) is still a
recompute fusion, not a gradient one; a relayout fusion's widen of a bias it adds is the
recompute's, not the relayout's; a weight cast again in a fusion only recomputes read counts
against the forward's cast. Handwritten: no jax needed."""

from __future__ import annotations

import hloparse
from hloflops.accounting import account

FWD = "jit(loss)/jvp()"
REC = "jit(loss)/transpose(jvp())/checkpoint/rematted_computation"
BWD = "jit(loss)/transpose(jvp())/checkpoint"


def _m(name: str) -> str:
    return f'metadata={{op_name="{name}"}}'


def _text(boundary: str) -> str:
    """The forward `t = tanh(x); (t * t) * (t + x)` in one fusion; its recompute of `t`, `t * t`
    and `t + x` in three, `t` read by two of them, `x` by two; `boundary` names the narrowing of the
    recompute's square (unnamed, or the checkpoint primitive's `remat2`)."""
    narrowing = f", {_m(boundary)}" if boundary else ""
    return f"""
HloModule widens_by_value, is_scheduled=true

forward {{
  x = bf16[4,32]{{1,0}} parameter(0)
  xw = f32[4,32]{{1,0}} convert(x)
  t = f32[4,32]{{1,0}} tanh(xw), {_m(FWD + "/tanh")}
  tn = bf16[4,32]{{1,0}} convert(t)
  tw = f32[4,32]{{1,0}} convert(tn)
  s = f32[4,32]{{1,0}} multiply(tw, tw), {_m(FWD + "/integer_pow")}
  u = f32[4,32]{{1,0}} add(tw, xw), {_m(FWD + "/add")}
  v = f32[4,32]{{1,0}} multiply(s, u), {_m(FWD + "/mul")}
  ROOT vn = bf16[4,32]{{1,0}} convert(v)
}}

recompute_t {{
  x = bf16[4,32]{{1,0}} parameter(0)
  rxw = f32[4,32]{{1,0}} convert(x)
  rt = f32[4,32]{{1,0}} tanh(rxw), {_m(REC + "/tanh")}
  ROOT rtn = bf16[4,32]{{1,0}} convert(rt)
}}

recompute_s {{
  t = bf16[4,32]{{1,0}} parameter(0)
  rtw = f32[4,32]{{1,0}} convert(t)
  rs = f32[4,32]{{1,0}} multiply(rtw, rtw), {_m(REC + "/integer_pow")}
  ROOT rsn = bf16[4,32]{{1,0}} convert(rs){narrowing}
}}

recompute_u {{
  t = bf16[4,32]{{1,0}} parameter(0)
  x = bf16[4,32]{{1,0}} parameter(1)
  rtw2 = f32[4,32]{{1,0}} convert(t)
  rxw2 = f32[4,32]{{1,0}} convert(x)
  ru = f32[4,32]{{1,0}} add(rtw2, rxw2), {_m(REC + "/add")}
  ROOT run = bf16[4,32]{{1,0}} convert(ru)
}}

ENTRY main {{
  x = bf16[4,32]{{1,0}} parameter(0)
  g = bf16[4,32]{{1,0}} parameter(1)
  fv = bf16[4,32]{{1,0}} fusion(x), kind=kLoop, calls=forward
  rt = bf16[4,32]{{1,0}} fusion(x), kind=kLoop, calls=recompute_t
  rs = bf16[4,32]{{1,0}} fusion(rt), kind=kLoop, calls=recompute_s
  ru = bf16[4,32]{{1,0}} fusion(rt, x), kind=kLoop, calls=recompute_u
  gs = bf16[4,32]{{1,0}} multiply(g, ru), {_m(BWD + "/mul")}
  gu = bf16[4,32]{{1,0}} multiply(g, rs), {_m(BWD + "/mul_u")}
  gt = bf16[4,32]{{1,0}} multiply(gs, gu), {_m(BWD + "/mul_t")}
  gf = bf16[4,32]{{1,0}} multiply(gt, fv), {_m(BWD + "/mul_f")}
  ROOT out = (bf16[4,32]{{1,0}}, bf16[4,32]{{1,0}}) tuple(fv, gf)
}}
"""


def _flags(boundary: str = ""):
    acc = account(hloparse.parse(_text(boundary)), xla={"flops": 0.0})
    return {r.name for r in acc.rows if r.remat}, acc


def test_a_program_input_widened_by_forward_and_recompute_counts_the_forwards():
    remat, acc = _flags()
    # x: the forward widens it once (xw), the recompute twice (rxw, rxw2): one runs because of remat
    assert len({"rxw", "rxw2"} & remat) == 1, remat
    assert "xw" not in remat, remat
    low, high = acc.remat_flops_bounds
    assert low <= acc.remat_flops <= high


def test_a_recompute_named_by_its_primitive_alone_is_matched_by_value_number():
    remat, _ = _flags()
    # tanh(x): the forward widens it once (tw), the recompute twice (rtw, rtw2)
    assert len({"rtw", "rtw2"} & remat) == 1, remat
    assert "tw" not in remat, remat
    assert {"rt", "rs", "ru"} <= remat, remat


def test_a_recompute_fusion_narrowing_under_the_checkpoints_name_is_still_a_recompute():
    remat, _ = _flags(BWD.rpartition("/checkpoint")[0] + "/remat2")
    assert len({"rxw", "rxw2"} & remat) == 1, remat
    assert len({"rtw", "rtw2"} & remat) == 1, remat
    assert "rt" in remat and "ru" in remat, remat


LM_FWD = "jit(loss)/jvp(LM)/decoder/block_0/self_attn/key"
LM_REC = "jit(loss)/transpose(jvp(LM))/decoder/checkpoint/rematted_computation/block_0/self_attn/key"
LM_BWD = "jit(loss)/transpose(jvp(LM))/decoder/checkpoint/block_0/self_attn"
LM_DOT = "jit(loss)/jvp(LM)/decoder/block_0/self_attn/dot_general"
DIMS = "lhs_contracting_dims={1}, rhs_contracting_dims={0}"

RELAYOUT = f"""
HloModule relayout_bias, is_scheduled=true

forward_key {{
  d = bf16[4,32]{{1,0}} parameter(0)
  b = bf16[32]{{0}} parameter(1)
  dw = f32[4,32]{{1,0}} convert(d)
  bw = f32[32]{{0}} convert(b)
  bb = f32[4,32]{{1,0}} broadcast(bw), dimensions={{1}}, {_m(LM_FWD + "/add")}
  k = f32[4,32]{{1,0}} add(dw, bb), {_m(LM_FWD + "/add")}
  kn = bf16[4,32]{{1,0}} convert(k)
  kw = f32[4,32]{{1,0}} convert(kn)
  kt = f32[32,4]{{0,1}} transpose(kw), dimensions={{1,0}}
  ROOT kc = f32[32,4]{{1,0}} copy(kt)
}}

recompute_key {{
  d = bf16[4,32]{{1,0}} parameter(0)
  b = bf16[32]{{0}} parameter(1)
  rdw = f32[4,32]{{1,0}} convert(d)
  rbw = f32[32]{{0}} convert(b)
  rbb = f32[4,32]{{1,0}} broadcast(rbw), dimensions={{1}}, {_m(LM_REC + "/add")}
  rk = f32[4,32]{{1,0}} add(rdw, rbb), {_m(LM_REC + "/add")}
  rkn = bf16[4,32]{{1,0}} convert(rk)
  rkw = f32[4,32]{{1,0}} convert(rkn)
  ROOT rkt = f32[4,32]{{0,1}} transpose(rkw), dimensions={{0,1}}
}}

ENTRY main {{
  d = bf16[4,32]{{1,0}} parameter(0)
  b = bf16[32]{{0}} parameter(1)
  q = f32[4,32]{{1,0}} parameter(2)
  g = f32[4,4]{{1,0}} parameter(3)
  fk = f32[32,4]{{1,0}} fusion(d, b), kind=kLoop, calls=forward_key
  s = f32[4,4]{{1,0}} dot(q, fk), {DIMS}, {_m(LM_DOT)}
  rk = f32[4,32]{{0,1}} fusion(d, b), kind=kLoop, calls=recompute_key
  gq = f32[4,32]{{1,0}} dot(g, rk), {DIMS}, {_m(LM_BWD + "/dot_general")}
  ROOT out = (f32[4,4]{{1,0}}, f32[4,32]{{1,0}}) tuple(s, gq)
}}
"""


def test_a_relayout_fusions_widen_of_a_bias_is_counted_value_by_value():
    acc = account(hloparse.parse(RELAYOUT), xla={"flops": 0.0})
    remat = {r.name for r in acc.rows if r.remat}
    assert "rk" in remat, remat
    # The recompute's relayout stands for the program without remat's relayout of the forward's
    # key, which widens the key, not the saved matmul it was computed from: that widen is model
    # FLOPs. The bias is added again only because of remat: the forward's fusion widens it once.
    assert "rdw" not in remat, remat
    assert "rbw" in remat, remat
    assert "bw" not in remat and "dw" not in remat, remat


CASTS = f"""
HloModule weight_casts, is_scheduled=true

cast_forward {{
  w = bf16[32,32]{{1,0}} parameter(0)
  ROOT ww = f32[32,32]{{1,0}} convert(w)
}}

cast_recompute {{
  w = bf16[32,32]{{1,0}} parameter(0)
  ROOT rww = f32[32,32]{{1,0}} convert(w)
}}

ENTRY main {{
  x = f32[4,32]{{1,0}} parameter(0)
  w = bf16[32,32]{{1,0}} parameter(1)
  g = f32[4,32]{{1,0}} parameter(2)
  fw = f32[32,32]{{1,0}} fusion(w), kind=kLoop, calls=cast_forward
  h = f32[4,32]{{1,0}} dot(x, fw), {DIMS}, {_m(LM_FWD + "/dot_general")}
  rw = f32[32,32]{{1,0}} fusion(w), kind=kLoop, calls=cast_recompute
  rh = f32[4,32]{{1,0}} dot(x, rw), {DIMS}, {_m(LM_REC + "/dot_general")}
  gh = f32[4,32]{{1,0}} multiply(g, rh), {_m(LM_BWD + "/mul")}
  ROOT out = (f32[4,32]{{1,0}}, f32[4,32]{{1,0}}) tuple(h, gh)
}}
"""


def test_a_weight_cast_again_for_the_recompute_alone_is_remat():
    acc = account(hloparse.parse(CASTS), xla={"flops": 0.0})
    remat = {r.name for r in acc.rows if r.remat}
    # The program without remat casts the weight once, for its forward's matmul and the
    # backward's; this one casts it again in a fusion only the recompute's matmul reads.
    assert "rh" in remat, remat
    assert "rww" in remat and "ww" not in remat, remat
