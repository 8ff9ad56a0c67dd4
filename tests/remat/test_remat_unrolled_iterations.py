"""A layer loop XLA unrolled whole, its last copy pruned of the carried input gradient
(analysis/hloflops/remat/unrolled_iterations.py). Xtpu 404 (Haiku layer stack of two gelu MLP layers,
tensor parallel): the program with remat has no backward layer loop left, two copies of its body,
and only the first runs `linear`'s input-gradient window loop (a multiply and a reduce); the program
without remat keeps its loop and runs that window loop on both trips, so the truth was -5,931 while
the range's low end stayed at -24. Nothing here says the twin kept its loop, so the dropped ops lower
the low end by one copy each and never the split. Small hand-written modules: two unrolled copies of
a backward body (a weight gradient fusion and an input gradient's window loop each), the second
lacking its window loop."""

from __future__ import annotations

import hloparse
from hloflops.accounting import account
from hloflops.remat.unrolled_iterations import unrolled_iteration_drops

_BODY = "jit(loss)/transpose(jvp())/while/body"
_RECOMPUTE = f"{_BODY}/closed_call/checkpoint/rematted_computation/sin"
_DOT = 'metadata={op_name="' + _BODY + '/closed_call/checkpoint/dot_general"}'
_INPUT_DOT = 'metadata={op_name="' + _BODY + '/closed_call/checkpoint/linear/dot_general"}'
_WINDOWS = 'backend_config={"known_trip_count":{"n":"2"}}'
# A module TPU's compiler wrote (the rule is TPU's): a tiled entry layout and a scoped memory config.
_TPU_LAYOUT = ("entry_computation_layout={(f32[8]{0:T(256)}, f32[2,8,16]{2,1,0:T(8,128)})"
               "->(f32[16]{0:T(256)}, f32[16]{0:T(256)})}")
_MEMORY = 'backend_config={"scoped_memory_configs":[]}'
# Each copy's layer of the weight stack, the loop's dynamic slice made static by the unrolling: the
# sign that the copies are layers (two of them).
_SLICE = 'metadata={op_name="' + _BODY + '/closed_call/dynamic_slice"}'


def _window_body(name: str) -> str:
    return f"""%{name} (v: (s32[], f32[8], f32[8,16])) -> (s32[], f32[8], f32[8,16]) {{
  %v = (s32[], f32[8]{{0}}, f32[8,16]{{1,0}}) parameter(0)
  %j = s32[] get-tuple-element(%v), index=0
  %acc = f32[8]{{0}} get-tuple-element(%v), index=1
  %k = f32[8,16]{{1,0}} get-tuple-element(%v), index=2
  %m2 = f32[8,16]{{1,0}} multiply(%k, %k), {_INPUT_DOT}
  %z = f32[] constant(0)
  %x = f32[8]{{0}} reduce(%m2, %z), dimensions={{1}}, to_apply=%add, {_INPUT_DOT}
  %sum = f32[8]{{0}} add(%acc, %x), {_INPUT_DOT}
  %one = s32[] constant(1)
  %n = s32[] add(%j, %one)
  ROOT %o = (s32[], f32[8]{{0}}, f32[8,16]{{1,0}}) tuple(%n, %sum, %k)
}}
"""


def _module(second: str, loop: bool = False) -> str:
    """Copy 1 (layer 1) computes the weight gradient and the input gradient; `second` is copy 2."""
    rolled = """, metadata={op_name="jit(loss)/transpose(jvp())/while"}""" if loop else ""
    return f"""HloModule m, is_scheduled=true, {_TPU_LAYOUT}

%add (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}}

%weight_grad (q0: f32[8], q1: f32[8,16]) -> f32[16] {{
  %q0 = f32[8]{{0}} parameter(0)
  %q1 = f32[8,16]{{1,0}} parameter(1)
  %r = f32[8]{{0}} sine(%q0), metadata={{op_name="{_RECOMPUTE}"}}
  %b = f32[8,16]{{1,0}} broadcast(%r), dimensions={{0}}
  %m = f32[8,16]{{1,0}} multiply(%b, %q1)
  %z = f32[] constant(0)
  ROOT %w = f32[16]{{0}} reduce(%m, %z), dimensions={{0}}, to_apply=%add, {_DOT}
}}

{_window_body("window_body")}
{_window_body("window_body2")}
%window_cond (w: (s32[], f32[8], f32[8,16])) -> pred[] {{
  %w = (s32[], f32[8]{{0}}, f32[8,16]{{1,0}}) parameter(0)
  %wi = s32[] get-tuple-element(%w), index=0
  %lim = s32[] constant(2)
  ROOT %lt = pred[] compare(%wi, %lim), direction=LT
}}

ENTRY %main (x: f32[8], stack: f32[2,8,16]) -> (f32[16], f32[16]) {{
  %x = f32[8]{{0}} parameter(0)
  %stack = f32[2,8,16]{{2,1,0}} parameter(1)
  %s1 = f32[1,8,16]{{2,1,0}} slice(%stack), slice={{[1:2], [0:8], [0:16]}}, {_SLICE}
  %k = f32[8,16]{{1,0}} bitcast(%s1)
  %s0 = f32[1,8,16]{{2,1,0}} slice(%stack), slice={{[0:1], [0:8], [0:16]}}, {_SLICE}
  %k2 = f32[8,16]{{1,0}} bitcast(%s0)
  %w1 = f32[16]{{0}} fusion(%x, %k), kind=kLoop, calls=%weight_grad, {_DOT}, {_MEMORY}
  %zero = s32[] constant(0)
  %start = (s32[], f32[8]{{0}}, f32[8,16]{{1,0}}) tuple(%zero, %x, %k)
  %windows = (s32[], f32[8]{{0}}, f32[8,16]{{1,0}}) while(%start), condition=%window_cond,
    body=%window_body, {_INPUT_DOT}, {_WINDOWS}
  %dx = f32[8]{{0}} get-tuple-element(%windows), index=1
{second}  %other = (s32[], f32[8]{{0}}, f32[8,16]{{1,0}}) while(%start), condition=%window_cond,
    body=%window_body2, {_WINDOWS}{rolled}
  ROOT %t = (f32[16]{{0}}, f32[16]{{0}}) tuple(%w1, %w2)
}}
"""


# Copy 2 (layer 0): only the weight gradient; its input gradient nothing reads.
_DROPPED = f"""  %w2 = f32[16]{{0}} fusion(%dx, %k2), kind=kLoop, calls=%weight_grad, {_DOT}
"""
# Copy 2 keeps its input gradient (read after it).
_KEPT = f"""  %w2 = f32[16]{{0}} fusion(%dx, %k2), kind=kLoop, calls=%weight_grad, {_DOT}
  %start2 = (s32[], f32[8]{{0}}, f32[8,16]{{1,0}}) tuple(%zero, %dx, %k2)
  %windows2 = (s32[], f32[8]{{0}}, f32[8,16]{{1,0}}) while(%start2), condition=%window_cond,
    body=%window_body2, {_INPUT_DOT}, {_WINDOWS}
"""


def _without_other(text: str) -> str:
    """No second loop beside the copies (the `%other` line only checks the layer-loop test)."""
    start = text.index("  %other =")
    return text[:start] + text[text.index("  ROOT %t"):]


def test_an_unrolled_copy_lacking_the_input_gradient_hinges_on_its_window_loop():
    module = hloparse.parse(_without_other(_module(_DROPPED)))
    found = unrolled_iteration_drops(module)
    assert found == {("window_body", "m2"): 1, ("window_body", "x"): 1, ("window_body", "sum"): 1}, found
    report = account(module)
    hinges = {h.name: h.flops for h in report.remat_hinges if h.twin_copies}
    # One copy of the window loop: 2 windows of (128 + 8 * 15 + 8).
    assert hinges == {"m2": 2 * 128, "x": 2 * 120, "sum": 2 * 8}, hinges
    low, high = report.remat_flops_bounds
    assert high - low >= 2 * (128 + 120 + 8)


def test_every_copy_whole_is_no_hinge():
    assert unrolled_iteration_drops(hloparse.parse(_without_other(_module(_KEPT)))) == {}


def test_a_layer_loop_left_of_that_scope_is_no_unrolled_copy():
    # A loop named for the scan (`.../transpose(jvp())/while`) is still there: a peeled trip's
    # business (peeled_iterations), not an unrolled loop's.
    assert unrolled_iteration_drops(hloparse.parse(_module(_DROPPED, loop=True))) == {}


def test_matmuls_alike_within_one_layer_are_no_copies():
    # No stack sliced into layers (TPU 460: a one-layer nnx scan whose two square weights' gradients
    # are named and shaped alike): the two weight gradients are no copies of a loop.
    text = _without_other(_module(_DROPPED)).replace(", " + _SLICE, "")
    assert unrolled_iteration_drops(hloparse.parse(text)) == {}
