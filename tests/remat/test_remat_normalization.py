"""XLA's float normalization (CPU) computes a bf16 elementwise op in f32: it widens each operand
once per fusion that reads it and narrows the result. How many widens run follows the fusions: a
recompute's fusion widening a forward value the program without remat's forward may widen as
often, or not (hloflops.remat.normalization). Left uncounted, such a widen is unsure: the range's
high end holds it. Handwritten: no jax needed."""

from __future__ import annotations

import hloparse
from hloflops.accounting import account


def _meta(name: str) -> str:
    return f'metadata={{op_name="{name}"}}'


RECOMPUTE = "jit(loss)/transpose(jvp())/closed_call/checkpoint/rematted_computation/integer_pow"


def _module(widen_name: str = "") -> str:
    named = f", {_meta(widen_name)}" if widen_name else ""
    return f"""
HloModule normalization, is_scheduled=true

forward_fusion {{
  p = bf16[4,32]{{1,0}} parameter(0)
  w = f32[4,32]{{1,0}} convert(p)
  m = f32[4,32]{{1,0}} multiply(w, w), {_meta("jit(loss)/jvp()/closed_call/integer_pow")}
  ROOT n = bf16[4,32]{{1,0}} convert(m)
}}

recompute_fusion {{
  p = bf16[4,32]{{1,0}} parameter(0)
  rw = f32[4,32]{{1,0}} convert(p){named}
  m = f32[4,32]{{1,0}} multiply(rw, rw), {_meta(RECOMPUTE)}
  ROOT rn = bf16[4,32]{{1,0}} convert(m)
}}

ENTRY main {{
  x = bf16[4,32]{{1,0}} parameter(0)
  g = bf16[4,32]{{1,0}} parameter(1)
  f = bf16[4,32]{{1,0}} fusion(x), kind=kLoop, calls=forward_fusion
  r = bf16[4,32]{{1,0}} fusion(x), kind=kLoop, calls=recompute_fusion
  b = bf16[4,32]{{1,0}} multiply(g, r), {_meta("jit(loss)/transpose(jvp())/closed_call/checkpoint/mul")}
  ROOT out = (bf16[4,32]{{1,0}}, bf16[4,32]{{1,0}}) tuple(f, b)
}}
"""


def test_an_uncounted_widen_in_a_recompute_fusion_raises_the_high_end():
    # The forward's own widen of x out of sight (its fusion unnamed, read by no named op): where
    # it is in sight, hloflops.remat.widen_counts counts a program input's widens value by value.
    forward = f'multiply(w, w), {_meta("jit(loss)/jvp()/closed_call/integer_pow")}'
    acc = account(hloparse.parse(_module().replace(forward, "multiply(w, w)")), xla={"flops": 0.0})
    remat = {r.name for r in acc.rows if r.remat}
    assert {"m", "rn"} <= remat and "rw" not in remat  # the recompute and its narrow; the widen is not counted
    hinges = [(h.name, h.counted) for h in acc.remat_hinges]
    assert ("rw", False) in hinges, hinges
    low, high = acc.remat_flops_bounds
    assert low <= acc.remat_flops and high >= acc.remat_flops + 4 * 32, acc.remat_flops_bounds


def test_a_convert_with_a_name_of_its_own_is_not_normalization():
    # A convert jax asked for (`convert_element_type`) carries its op_name: an op of the program,
    # here a forward op XLA copied into the recompute's fusion, counted as such (rule 4), not left
    # unsure as a widen of float normalization's.
    acc = account(hloparse.parse(_module("jit(loss)/jvp()/closed_call/convert_element_type")), xla={"flops": 0.0})
    assert "rw" in {r.name for r in acc.rows if r.remat}
    assert ("rw", False) not in [(h.name, h.counted) for h in acc.remat_hinges]
