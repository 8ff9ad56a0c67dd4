"""The unnamed multiply of a matvec TPU rewrote as `reduce(broadcast(v) * w)` shares its reduce's
answer (analysis/hloflops/remat/matvec_multiplies.py). TPU draw 210 (nnx_scan, tensor parallel):
the recompute's matvec reduce was an unsure hinge and its multiply, reading a slice of the loop's
weight stack, model FLOPs outside the range (multiply truth 1,536 above the high end)."""

from __future__ import annotations

import hloparse
from hloflops.remat.index import RematIndex
from hloflops.remat.matvec_multiplies import matvec_multiplies, with_matvec_multiplies

_DOT = '"jit(loss)/transpose(jvp())/while/body/closed_call/checkpoint/rematted_computation/dot_general"'


_BACKWARD_DOT = '"jit(loss)/transpose(jvp(jvp()))/checkpoint/dot_general"'


def _module(named_multiply: bool = False, broadcast_name: str = _DOT) -> str:
    meta = f", metadata={{op_name={_DOT}}}" if named_multiply else ""
    return f"""HloModule m, is_scheduled=true

%add (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}}

%matvec (w: f32[16,32], v: f32[16]) -> f32[32] {{
  %v = f32[16]{{0}} parameter(1)
  %bv = f32[16,32]{{1,0}} broadcast(%v), dimensions={{0}}, metadata={{op_name={broadcast_name}}}
  %w = f32[16,32]{{1,0}} parameter(0)
  %m = f32[16,32]{{1,0}} multiply(%bv, %w){meta}
  %z = f32[] constant(0)
  ROOT %r = f32[32]{{0}} reduce(%m, %z), dimensions={{0}}, to_apply=%add, metadata={{op_name={_DOT}}}
}}

ENTRY %main (x0: f32[16,32], x1: f32[16]) -> f32[32] {{
  %x0 = f32[16,32]{{1,0}} parameter(0)
  %x1 = f32[16]{{0}} parameter(1)
  ROOT %f = f32[32]{{0}} fusion(%x0, %x1), kind=kLoop, calls=%matvec
}}
"""


def test_unnamed_matvec_multiply_is_its_reduces_other_half():
    assert matvec_multiplies(hloparse.parse(_module())) == {("matvec", "m"): ("matvec", "r")}


def test_broadcast_named_for_another_dot_still_marks_the_product_half():
    # XLA fused the recompute's matvec with the backward's use of its vector (utpu 191): the
    # broadcast keeps the backward dot's name, the reduce the recompute's.
    module = hloparse.parse(_module(broadcast_name=_BACKWARD_DOT))
    assert matvec_multiplies(module) == {("matvec", "m"): ("matvec", "r")}
    assert matvec_multiplies(hloparse.parse(_module(broadcast_name='"jit(loss)/jvp()/mul"'))) == {}


def test_named_multiply_is_no_matvec_half():
    # A multiply jax named is an op of its own, decided by the pairing.
    assert matvec_multiplies(hloparse.parse(_module(named_multiply=True))) == {}


def test_multiply_takes_the_reduces_answer():
    module = hloparse.parse(_module())
    unsure = with_matvec_multiplies(module, RematIndex(frozenset(), 1, (), unsure=frozenset({("matvec", "r")})))
    assert ("matvec", "m") in unsure.unsure and ("matvec", "m") not in unsure.remat
    counted = with_matvec_multiplies(module, RematIndex(frozenset({("matvec", "r")}), 1, (),
                                                        weak=frozenset({("matvec", "r")})))
    assert ("matvec", "m") in counted.remat and ("matvec", "m") in counted.weak
    model = RematIndex(frozenset(), 1, ())
    assert with_matvec_multiplies(module, model) is model
