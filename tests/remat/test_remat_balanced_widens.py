"""Float normalization's widens (CPU: a bf16 value widened to f32 once per fusion that reads it)
follow the fusions. A checkpointed block's forward, whose intermediates nothing else reads, is one
fusion widening each value once; its recompute, whose intermediates the backward reads, is split
into several fusions, each widening what it reads, as is the program without remat's forward (its
backward reads the same intermediates). So the widens that run because of remat are as many as
the forward's, per value: the recompute's widens of a value beyond the forward's count are the
program without remat's too (more seed 9, gelu's `h = x @ w + b` widened by three fusions of
the recompute and once by the forward: convert +520,192 before), and a forward value the
recompute reads (a bias) is widened there as often as the forward widens it
(hloflops.remat.normalization). Handwritten: no jax needed."""

from __future__ import annotations

import hloparse
from hloflops.accounting import account

FWD = "jit(loss)/jvp(LM)/block_0/mlp"
REC = "jit(loss)/transpose(jvp(LM))/checkpoint/rematted_computation/block_0/mlp"
BWD = "jit(loss)/transpose(jvp(LM))/checkpoint/block_0/mlp"


def _m(name: str) -> str:
    return f'metadata={{op_name="{name}"}}'


TEXT = f"""
HloModule balanced_widens, is_scheduled=true

bias {{
  p = f32[32]{{0}} parameter(0)
  ROOT bc = bf16[32]{{0}} convert(p), {_m(FWD + "/Dense_0/convert_element_type")}
}}

forward_chain {{
  d = bf16[4,32]{{1,0}} parameter(0)
  b = bf16[32]{{0}} parameter(1)
  dw = f32[4,32]{{1,0}} convert(d)
  bw = f32[32]{{0}} convert(b)
  bb = f32[4,32]{{1,0}} broadcast(bw), dimensions={{1}}
  h = f32[4,32]{{1,0}} add(dw, bb), {_m(FWD + "/Dense_0/add")}
  hn = bf16[4,32]{{1,0}} convert(h)
  hw = f32[4,32]{{1,0}} convert(hn)
  sq = f32[4,32]{{1,0}} multiply(hw, hw), {_m(FWD + "/integer_pow")}
  sqn = bf16[4,32]{{1,0}} convert(sq)
  sqw = f32[4,32]{{1,0}} convert(sqn)
  y = f32[4,32]{{1,0}} multiply(sqw, hw), {_m(FWD + "/mul")}
  ROOT yn = bf16[4,32]{{1,0}} convert(y)
}}

recompute_h {{
  d = bf16[4,32]{{1,0}} parameter(0)
  b = bf16[32]{{0}} parameter(1)
  rdw = f32[4,32]{{1,0}} convert(d)
  rbw = f32[32]{{0}} convert(b)
  rbb = f32[4,32]{{1,0}} broadcast(rbw), dimensions={{1}}
  rh = f32[4,32]{{1,0}} add(rdw, rbb), {_m(REC + "/Dense_0/add")}
  ROOT rhn = bf16[4,32]{{1,0}} convert(rh)
}}

recompute_sq {{
  h = bf16[4,32]{{1,0}} parameter(0)
  rhw1 = f32[4,32]{{1,0}} convert(h)
  rsq = f32[4,32]{{1,0}} multiply(rhw1, rhw1), {_m(REC + "/integer_pow")}
  ROOT rsqn = bf16[4,32]{{1,0}} convert(rsq)
}}

recompute_y {{
  s = bf16[4,32]{{1,0}} parameter(0)
  h = bf16[4,32]{{1,0}} parameter(1)
  rsqw = f32[4,32]{{1,0}} convert(s)
  rhw2 = f32[4,32]{{1,0}} convert(h)
  ry = f32[4,32]{{1,0}} multiply(rsqw, rhw2), {_m(REC + "/mul")}
  ROOT ryn = bf16[4,32]{{1,0}} convert(ry)
}}

ENTRY main {{
  x = bf16[4,32]{{1,0}} parameter(0)
  bp = f32[32]{{0}} parameter(1)
  g = bf16[4,32]{{1,0}} parameter(2)
  b = bf16[32]{{0}} fusion(bp), kind=kLoop, calls=bias
  fy = bf16[4,32]{{1,0}} fusion(x, b), kind=kLoop, calls=forward_chain
  rh = bf16[4,32]{{1,0}} fusion(x, b), kind=kLoop, calls=recompute_h
  rs = bf16[4,32]{{1,0}} fusion(rh), kind=kLoop, calls=recompute_sq
  ry = bf16[4,32]{{1,0}} fusion(rs, rh), kind=kLoop, calls=recompute_y
  gy = bf16[4,32]{{1,0}} multiply(g, ry), {_m(BWD + "/mul")}
  gh = bf16[4,32]{{1,0}} multiply(gy, rh), {_m(BWD + "/mul_h")}
  gs = bf16[4,32]{{1,0}} multiply(gy, rs), {_m(BWD + "/mul_s")}
  ROOT out = (bf16[4,32]{{1,0}}, bf16[4,32]{{1,0}}, bf16[4,32]{{1,0}}) tuple(fy, gh, gs)
}}
"""


def _flags():
    acc = account(hloparse.parse(TEXT), xla={"flops": 0.0})
    return {r.name for r in acc.rows if r.remat}, acc


def test_a_value_widened_by_more_recompute_fusions_than_forward_ones_counts_the_forwards():
    remat, _ = _flags()
    # h: the forward widens it once (hw), the recompute twice (rhw1, rhw2): one runs because of
    # remat. The recompute reads nothing the forward computed and the forward hands nothing to the
    # backward (a checkpoint around the whole module): that one is the forward's own widen, the
    # recompute's are the program without remat's forward
    # (hloflops.remat.whole_checkpoint_widens).
    assert len({"hw", "rhw1", "rhw2"} & remat) == 1, remat
    assert "hw" in remat, remat
    # the square: once in each
    assert len({"sqw", "rsqw"} & remat) == 1, remat


def test_a_forward_value_the_recompute_widens_as_the_forward_does_is_remat():
    remat, _ = _flags()
    # the bias, widened once by the forward's fusion and once by the recompute's
    assert "rbw" in remat, remat
    assert "bw" not in remat  # the forward's own


def test_the_recompute_itself_is_remat():
    remat, acc = _flags()
    assert {"rh", "rsq", "ry"} <= remat, remat
    low, high = acc.remat_flops_bounds
    assert low <= acc.remat_flops <= high
