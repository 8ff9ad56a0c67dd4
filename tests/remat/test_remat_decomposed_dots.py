"""A decomposed dot's product is unsure with its reduce (analysis/hloflops/remat/decomposed_dots.py).
utpu 191 (whole_model mlp, tensor parallelism): XLA rewrote each matrix-vector dot as a multiply
and a reduce, the reduce keeping the dot's op_name; three recomputed reduces were hinges and their
multiplies, unnamed, model FLOPs, sure (multiply -16,260 above the high end). Small hand-written
modules."""

from __future__ import annotations

import hloparse
from hloflops.remat.decomposed_dots import decomposed_dot_products

_DOT = '"jit(loss)/transpose(jvp(jvp()))/checkpoint/rematted_computation/dot_general"'


def _module(named_product: bool = False, shared: bool = False) -> str:
    meta = f", metadata={{op_name={_DOT}}}" if named_product else ""
    extra = "  %other = f32[4,4]{1,0} negate(%m)\n" if shared else ""
    return f"""HloModule m, is_scheduled=true

%add (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}}

%dot (v: f32[4], w: f32[4,4]) -> f32[4] {{
  %v = f32[4]{{0}} parameter(0)
  %w = f32[4,4]{{1,0}} parameter(1)
  %bv = f32[4,4]{{1,0}} broadcast(%v), dimensions={{0}}
  %m = f32[4,4]{{1,0}} multiply(%bv, %w){meta}
{extra}  %z = f32[] constant(0)
  ROOT %r = f32[4]{{0}} reduce(%m, %z), dimensions={{0}}, to_apply=%add, metadata={{op_name={_DOT}}}
}}

ENTRY %main (x: f32[4], y: f32[4,4]) -> f32[4] {{
  %x = f32[4]{{0}} parameter(0)
  %y = f32[4,4]{{1,0}} parameter(1)
  ROOT %f = f32[4]{{0}} fusion(%x, %y), kind=kLoop, calls=%dot
}}
"""


def test_unnamed_product_of_an_unsure_reduce_is_unsure():
    assert decomposed_dot_products(hloparse.parse(_module()), {("dot", "r")}) == {("dot", "m")}


def test_reduce_not_a_hinge_leaves_its_product():
    assert decomposed_dot_products(hloparse.parse(_module()), set()) == set()


def test_named_product_is_decided_by_its_own_name():
    assert decomposed_dot_products(hloparse.parse(_module(named_product=True)), {("dot", "r")}) == set()


def test_product_read_elsewhere_is_no_dot_half():
    assert decomposed_dot_products(hloparse.parse(_module(shared=True)), {("dot", "r")}) == set()
