"""Float normalization's converts in fusions that serve the recompute alone (after optimization,
CPU; analysis/hloflops/remat/recompute_converts.py and the widen-only fusions of
analysis/hloflops/remat/normalization.py).

A recompute relaid out for a backward matmul (a residual sum transposed for the next conv's
kernel gradient) recomputes its value from what it reads: every convert of that chain runs
because of remat, but one widen of the handed-out value, which stands for the program without
remat's widen of its stored value. Before the rule only the roundings of the recomputed ops
counted, and the widens of the values read were left out (more 10: convert -393,248; more 103:
-196,736). A fusion only widening a forward value for a recompute (XLA's lone widen for a library
fusion's conv) is on the recompute's side of the widen count (held-out more 186: -262,144; more
77: -16,384). Handwritten: no jax needed."""

from __future__ import annotations

import hloparse
from hloflops.accounting import account


def _meta(name: str) -> str:
    return f'metadata={{op_name="{name}"}}'


FORWARD = "jit(loss)/jvp(Net)/block/add"
RECOMPUTE = "jit(loss)/transpose(jvp(Net))/jvp(Net)/checkpoint/rematted_computation/block/add"
BACKWARD = "jit(loss)/transpose(jvp(Net))/jvp(Net)/dot_general"
FORWARD_DOT = "jit(loss)/jvp(Net)/dot_general"
RECOMPUTED_MUL = "jit(loss)/transpose(jvp(Net))/jvp(Net)/checkpoint/rematted_computation/block/mul"

RELAYOUT = f"""
HloModule relaid_recompute, is_scheduled=true

forward_fusion {{
  x = bf16[8,16]{{1,0}} parameter(0)
  c = f32[8,16]{{1,0}} parameter(1)
  wx = f32[8,16]{{1,0}} convert(x)
  nc = bf16[8,16]{{1,0}} convert(c)
  wc = f32[8,16]{{1,0}} convert(nc)
  s = f32[8,16]{{1,0}} add(wx, wc), {_meta(FORWARD)}
  ROOT ns = bf16[8,16]{{1,0}} convert(s)
}}

relayout_fusion {{
  x = bf16[8,16]{{1,0}} parameter(0)
  c = f32[8,16]{{1,0}} parameter(1)
  rwx = f32[8,16]{{1,0}} convert(x)
  rnc = bf16[8,16]{{1,0}} convert(c)
  rwc = f32[8,16]{{1,0}} convert(rnc)
  rs = f32[8,16]{{1,0}} add(rwx, rwc), {_meta(RECOMPUTE)}
  rns = bf16[8,16]{{1,0}} convert(rs)
  rws = f32[8,16]{{1,0}} convert(rns)
  t = f32[16,8]{{0,1}} transpose(rws), dimensions={{1,0}}
  ROOT copy = f32[16,8]{{1,0}} copy(t)
}}

widen_fusion {{
  p = bf16[8,16]{{1,0}} parameter(0)
  ROOT w = f32[8,16]{{1,0}} convert(p)
}}

ENTRY main {{
  x0 = bf16[8,16]{{1,0}} parameter(0)
  h = f32[8,16]{{1,0}} parameter(1)
  g = f32[8,4]{{1,0}} parameter(2)
  x = bf16[8,16]{{1,0}} multiply(x0, x0), {_meta("jit(loss)/jvp(Net)/stem/mul")}
  c = f32[8,16]{{1,0}} multiply(h, h), {_meta("jit(loss)/jvp(Net)/block/conv/mul")}
  f = bf16[8,16]{{1,0}} fusion(x, c), kind=kLoop, calls=forward_fusion
  wf = f32[8,16]{{1,0}} fusion(f), kind=kLoop, calls=widen_fusion
  k = f32[16,4]{{1,0}} parameter(3)
  y = f32[8,4]{{1,0}} dot(wf, k), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}, {_meta(FORWARD_DOT)}
  r = f32[16,8]{{1,0}} fusion(x, c), kind=kLoop, calls=relayout_fusion
  dk = f32[16,4]{{1,0}} dot(r, g), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}, {_meta(BACKWARD)}
  ROOT out = (f32[8,4]{{1,0}}, f32[16,4]{{1,0}}) tuple(y, dk)
}}
"""


def test_a_relaid_recompute_runs_all_its_converts_but_one_widen():
    acc = account(hloparse.parse(RELAYOUT), xla={"flops": 0.0})
    remat = {r.name for r in acc.rows if r.remat and r.computation == "relayout_fusion"}
    # The recomputed sum, its rounding, and the rounding of the f32 value it reads and the widen
    # of the bf16 one: the program without remat relays out its stored sum, one widen.
    assert {"rs", "rns", "rws", "rnc", "rwc"} <= remat, remat
    assert "rwx" not in remat, remat
    convert_flops = sum(r.total.flops for r in acc.rows if r.remat and r.opcode == "convert")
    assert convert_flops == 4 * 8 * 16, convert_flops


WIDEN_FOR_RECOMPUTE = f"""
HloModule widen_for_recompute, is_scheduled=true

forward_fusion {{
  x = bf16[8,16]{{1,0}} parameter(0)
  w = f32[8,16]{{1,0}} convert(x)
  m = f32[8,16]{{1,0}} multiply(w, w), {_meta("jit(loss)/jvp(Net)/block/mul")}
  ROOT n = bf16[8,16]{{1,0}} convert(m)
}}

widen_fusion {{
  p = bf16[8,16]{{1,0}} parameter(0)
  ROOT rw = f32[8,16]{{1,0}} convert(p)
}}

ENTRY main {{
  x0 = bf16[8,16]{{1,0}} parameter(0)
  g = f32[8,16]{{1,0}} parameter(1)
  x = bf16[8,16]{{1,0}} multiply(x0, x0), {_meta("jit(loss)/jvp(Net)/stem/mul")}
  f = bf16[8,16]{{1,0}} fusion(x), kind=kLoop, calls=forward_fusion
  w = f32[8,16]{{1,0}} fusion(x), kind=kLoop, calls=widen_fusion
  m = f32[8,16]{{1,0}} multiply(w, w), {_meta(RECOMPUTED_MUL)}
  b = f32[8,16]{{1,0}} multiply(g, m), {_meta("jit(loss)/transpose(jvp(Net))/jvp(Net)/block/mul")}
  ROOT out = (bf16[8,16]{{1,0}}, f32[8,16]{{1,0}}) tuple(f, b)
}}
"""


def test_a_fusion_only_widening_a_forward_value_for_a_recompute_is_remat():
    acc = account(hloparse.parse(WIDEN_FOR_RECOMPUTE), xla={"flops": 0.0})
    remat = {(r.computation, r.name) for r in acc.rows if r.remat}
    # The forward widens `x` once in its fusion; the recompute's own widen of it is the one more.
    assert ("widen_fusion", "rw") in remat, remat
