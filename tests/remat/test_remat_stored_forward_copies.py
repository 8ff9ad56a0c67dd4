"""A recompute's copy nested in a gradient fusion, of a value this program's forward stores as a
fusion output, is a hinge (analysis/hloflops/remat/stored_forward_copies.py). wtpu 356 (linen_whole,
tensor parallelism): the recompute copies each block's layer norm output into the query's, key's and
value's weight-gradient fusions, counted as model FLOPs; the program without remat reads the norm
output its forward stores (`fusion.35`) and copies nothing, and the truth (29,807,104) lay above the
range's high end (28,816,896). Small hand-written modules."""

from __future__ import annotations

import hloparse
from hloflops.remat.stored_forward_copies import stored_forward_copies

_FORWARD = '"jit(loss)/jvp(Model)/LayerNorm_0/add"'
_RECOMPUTE = '"jit(loss)/transpose(jvp(jvp()))/checkpoint/rematted_computation/Model/LayerNorm_0/add"'
_GRADIENT = '"jit(loss)/transpose(jvp(Model))/query/dot_general"'
_READER = '"jit(loss)/jvp(Model)/query/dot_general"'


def _module(stored: bool = True) -> str:
    """The forward's `x + y` in a fusion: its own (`stored`: the fusion's output is the value) or
    fused into the forward's reader (a negate after it); the recompute's copy nested in a gradient
    fusion."""
    called, name = ("norm", _FORWARD) if stored else ("reader", _READER)
    forward = f"%v = f32[2,8]{{1,0}} fusion(%x0, %x1), kind=kLoop, calls=%{called}, metadata={{op_name={name}}}"
    return f"""HloModule m, is_scheduled=true

%norm (p0: f32[2,8], p1: f32[2,8]) -> f32[2,8] {{
  %p0 = f32[2,8]{{1,0}} parameter(0)
  %p1 = f32[2,8]{{1,0}} parameter(1)
  ROOT %d = f32[2,8]{{1,0}} add(%p0, %p1), metadata={{op_name={_FORWARD}}}
}}

%reader (r0: f32[2,8], r1: f32[2,8]) -> f32[2,8] {{
  %r0 = f32[2,8]{{1,0}} parameter(0)
  %r1 = f32[2,8]{{1,0}} parameter(1)
  %d = f32[2,8]{{1,0}} add(%r0, %r1), metadata={{op_name={_FORWARD}}}
  ROOT %n = f32[2,8]{{1,0}} negate(%d)
}}

%renorm (p0: f32[2,8], p1: f32[2,8]) -> f32[2,8] {{
  %p0 = f32[2,8]{{1,0}} parameter(0)
  %p1 = f32[2,8]{{1,0}} parameter(1)
  ROOT %d = f32[2,8]{{1,0}} add(%p0, %p1), metadata={{op_name={_RECOMPUTE}}}
}}

%weight_gradient (q0: f32[2,8], q1: f32[2,8], g: f32[2,8]) -> f32[8,8] {{
  %q0 = f32[2,8]{{1,0}} parameter(0)
  %q1 = f32[2,8]{{1,0}} parameter(1)
  %g = f32[2,8]{{1,0}} parameter(2)
  %inner = f32[2,8]{{1,0}} fusion(%q0, %q1), kind=kLoop, calls=%renorm, metadata={{op_name={_RECOMPUTE}}}
  ROOT %w = f32[8,8]{{1,0}} dot(%inner, %g), lhs_contracting_dims={{0}}, rhs_contracting_dims={{0}},
    metadata={{op_name={_GRADIENT}}}
}}

ENTRY %main (x0: f32[2,8], x1: f32[2,8], g0: f32[2,8]) -> f32[8,8] {{
  %x0 = f32[2,8]{{1,0}} parameter(0)
  %x1 = f32[2,8]{{1,0}} parameter(1)
  %g0 = f32[2,8]{{1,0}} parameter(2)
  {forward}
  %b = (f32[2,8], f32[2,8]) opt-barrier((f32[2,8], f32[2,8]) tuple(%x0, %x1))
  %b0 = f32[2,8]{{1,0}} get-tuple-element(%b), index=0
  %b1 = f32[2,8]{{1,0}} get-tuple-element(%b), index=1
  %g = f32[2,8]{{1,0}} add(%g0, %v)
  ROOT %w = f32[8,8]{{1,0}} fusion(%b0, %b1, %g), kind=kOutput, calls=%weight_gradient, metadata={{op_name={_GRADIENT}}}
}}
"""


def _ops(text: str) -> list:
    """The pairing's site ops of a module (as hloflops.remat.pairing builds them)."""
    from hloflops.remat import pairing
    seen: dict = {}
    original = pairing.fusion_copies

    def spy(module, ops, *args, **kwargs):
        seen["ops"] = ops
        return original(module, ops, *args, **kwargs)
    pairing.fusion_copies = spy
    try:
        pairing.find_remat(hloparse.parse(text))
    finally:
        pairing.fusion_copies = original
    return seen["ops"]


def test_copy_of_a_value_the_forward_stores_is_found():
    text = _module()
    found = stored_forward_copies(hloparse.parse(text), _ops(text))
    assert {key[:2] for key in found} == {("renorm", "d")}, found


def test_value_the_forward_fuses_into_its_reader_is_no_hinge():
    # TPU draws 2 and 6: gelu fused into Dense_1's matmul, never a fusion's output; the program
    # without remat copies it into its weight-gradient fusion as this one does.
    text = _module(stored=False)
    assert stored_forward_copies(hloparse.parse(text), _ops(text)) == set()
