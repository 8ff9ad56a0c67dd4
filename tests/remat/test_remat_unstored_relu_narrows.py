"""A recomputed relu narrowed in a small fusion of its own, whose forward copy is narrowed only at
the root of a matmul-operand fusion nested in the next layer's matmul fusion (nothing stores it),
is a `twin_copies` hinge of the twin's readers plus one (analysis/hloflops/remat/unstored_relu_narrows.py).
wtpu 305, 319, 331, 309 and vtpu 254 (relu MLPs in bf16, the checkpoint recomputing the matmul):
the twin stores the bias add narrowed and copies the relu into each reader, a widen and a narrow
each, and the range's low end lay above the truth (305: convert -36,864 true, +12,288 counted).
Small hand-written modules."""

from __future__ import annotations

import hloparse
from hloflops.remat.unstored_relu_narrows import unstored_relu_narrows

_FORWARD = '"jit(loss)/jvp()/while/body/closed_call/jit(relu)/max"'
_RECOMPUTE = '"jit(loss)/transpose(jvp())/while/body/closed_call/checkpoint/rematted_computation/jit(relu)/max"'
_NEXT = '"jit(loss)/jvp()/while/body/closed_call/dot_general"'
_T = "(f32[8,8], bf16[8,16], f32[16], bf16[16,4], f32[8,16])"  # the loop's state
_GRADIENT = '"jit(loss)/transpose(jvp())/while/body/closed_call/checkpoint/dot_general"'


def _module(stored: bool = False) -> str:
    """In a loop's body (both layers' frames in one body, enough for the sign): the forward's relu
    narrowed in a matmul fusion nested in the next layer's (or, `stored`, a top-level fusion whose
    output the next matmul reads); the recompute's relu narrowed in a loop fusion of its own, nested
    in the weight gradient's fusion."""
    if stored:
        forward = f"""%h = bf16[8,16]{{1,0}} fusion(%x, %w, %bias), kind=kOutput, calls=%layer,
    metadata={{op_name={_NEXT}}}
  %y = f32[8,4]{{1,0}} dot(%h, %w2), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}},
    metadata={{op_name={_NEXT}}}"""
    else:
        forward = (f"%y = f32[8,4]{{1,0}} fusion(%x, %w, %bias, %w2), kind=kOutput, calls=%next, "
                   f"metadata={{op_name={_NEXT}}}")
    return f"""HloModule m, is_scheduled=true

%layer (p0: f32[8,8], p1: bf16[8,16], p2: f32[16]) -> bf16[8,16] {{
  %p0 = f32[8,8]{{1,0}} parameter(0)
  %p1 = bf16[8,16]{{1,0}} parameter(1)
  %c = f32[8,16]{{1,0}} convolution(%p0, %p1), dim_labels=bf_io->bf, metadata={{op_name={_NEXT}}}
  %p2 = f32[16]{{0}} parameter(2)
  %bb = f32[8,16]{{1,0}} broadcast(%p2), dimensions={{1}}
  %a = f32[8,16]{{1,0}} add(%c, %bb)
  %z = f32[] constant(0)
  %zb = f32[8,16]{{1,0}} broadcast(%z), dimensions={{}}
  %m = f32[8,16]{{1,0}} maximum(%a, %zb), metadata={{op_name={_FORWARD}}}
  ROOT %n = bf16[8,16]{{1,0}} convert(%m)
}}

%next (q0: f32[8,8], q1: bf16[8,16], q2: f32[16], q3: bf16[16,4]) -> f32[8,4] {{
  %q0 = f32[8,8]{{1,0}} parameter(0)
  %q1 = bf16[8,16]{{1,0}} parameter(1)
  %q2 = f32[16]{{0}} parameter(2)
  %h = bf16[8,16]{{1,0}} fusion(%q0, %q1, %q2), kind=kOutput, calls=%layer, metadata={{op_name={_NEXT}}}
  %q3 = bf16[16,4]{{1,0}} parameter(3)
  ROOT %y = f32[8,4]{{1,0}} convolution(%h, %q3), dim_labels=bf_io->bf, metadata={{op_name={_NEXT}}}
}}

%relu (r0: f32[8,16]) -> bf16[8,16] {{
  %r0 = f32[8,16]{{1,0}} parameter(0)
  %z = f32[] constant(0)
  %zb = f32[8,16]{{1,0}} broadcast(%z), dimensions={{}}
  %m = f32[8,16]{{1,0}} maximum(%r0, %zb), metadata={{op_name={_RECOMPUTE}}}
  ROOT %n = bf16[8,16]{{1,0}} convert(%m)
}}

%weight_gradient (g0: f32[8,16], g1: f32[8,4]) -> f32[16,4] {{
  %g0 = f32[8,16]{{1,0}} parameter(0)
  %r = bf16[8,16]{{1,0}} fusion(%g0), kind=kLoop, calls=%relu, metadata={{op_name={_RECOMPUTE}}}
  %g1 = f32[8,4]{{1,0}} parameter(1)
  ROOT %dw = f32[16,4]{{1,0}} convolution(%r, %g1), dim_labels=fb_io->bf, metadata={{op_name={_GRADIENT}}}
}}

%body (t: {_T}) -> {_T} {{
  %t = {_T} parameter(0)
  %x = f32[8,8]{{1,0}} get-tuple-element(%t), index=0
  %w = bf16[8,16]{{1,0}} get-tuple-element(%t), index=1
  %bias = f32[16]{{0}} get-tuple-element(%t), index=2
  %w2 = bf16[16,4]{{1,0}} get-tuple-element(%t), index=3
  %pre = f32[8,16]{{1,0}} get-tuple-element(%t), index=4
  {forward}
  %dw = f32[16,4]{{1,0}} fusion(%pre, %y), kind=kOutput, calls=%weight_gradient, metadata={{op_name={_GRADIENT}}}
  ROOT %out = {_T} tuple(%x, %w, %bias, %w2, %pre)
}}

%cond (c: {_T}) -> pred[] {{
  %c = {_T} parameter(0)
  ROOT %k = pred[] constant(true)
}}

ENTRY %main (a: {_T}) -> {_T} {{
  %a = {_T} parameter(0)
  ROOT %loop = {_T} while(%a), condition=%cond, body=%body
}}
"""


def test_recompute_narrow_of_an_unstored_relu_is_a_hinge_of_the_readers_plus_one():
    # two readers in the twin (the next matmul, the stack for the weight gradient): 2 * 2 + 1 casts
    # there, 2 here, so 3 beyond what the recompute's narrow counts
    assert unstored_relu_narrows(hloparse.parse(_module())) == {("relu", "n"): 3}


def test_relu_the_forward_stores_is_no_hinge():
    # a top-level fusion outputs the relu: the twin reads that stored value, copies nothing
    assert unstored_relu_narrows(hloparse.parse(_module(stored=True))) == {}


def test_relu_outside_a_differentiated_loop_is_no_hinge():
    # no scan: the twin keeps the forward's relu live for the weight gradient, no stacking reader
    text = _module().replace("/while/body/", "/")
    assert unstored_relu_narrows(hloparse.parse(text)) == {}


def test_relu_in_a_loop_xla_removed_is_no_hinge():
    # one trip: XLA inlines the body, and the twin's loop is gone too (no stacks to feed)
    text = _module().replace("while(%a), condition=%cond, body=%body", "call(%a), to_apply=%body")
    assert unstored_relu_narrows(hloparse.parse(text)) == {}


def test_forward_copy_widening_a_stored_narrow_counts_two_fewer():
    # the forward copy widens a bf16 bias add (TPU 194): that widen and narrow are the twin's too
    text = _module().replace("%a = f32[8,16]{1,0} add(%c, %bb)",
                             "%s = f32[8,16]{1,0} add(%c, %bb)\n  %a16 = bf16[8,16]{1,0} convert(%s)\n"
                             "  %a = f32[8,16]{1,0} convert(%a16)")
    assert "%a16" in text
    assert unstored_relu_narrows(hloparse.parse(text)) == {("relu", "n"): 1}


def test_forward_copy_widening_its_own_matmul_output_counts_one_fewer():
    # TPU 471: the forward copy's matmul emits bf16 and the copy widens it, relu, narrows: no convert
    # here stands for the narrow the twin may store its f32 matmul output with, so only the widen is
    # the twin's too: 2 * 2 + 1 casts there, 3 here (widen, narrow; the recompute's narrow), 2 beyond
    text = _module().replace("%c = f32[8,16]{1,0} convolution(%p0, %p1)",
                             "%c16 = bf16[8,16]{1,0} convolution(%p0, %p1)").replace(
        "%a = f32[8,16]{1,0} add(%c, %bb)", "%a = f32[8,16]{1,0} convert(%c16)")
    assert "%c16" in text
    assert unstored_relu_narrows(hloparse.parse(text)) == {("relu", "n"): 2}
