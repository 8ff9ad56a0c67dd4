"""A loop trip XLA peeled off the loop and pruned of what only the loop's state needed
(analysis/hloflops/remat/peeled_iterations.py). Held-out TPU 91 (scan, relu MLP, offload policy,
fsdp): the program with remat peels its backward loop's last trip, which drops layer 0's input
gradient (a multiply and a reduce: a batch of one row) and its accumulation add; the program without
remat runs its loop whole, 3 trips, so truth is -16,384 while the split said 0 with bounds [0, 64].
Nothing here says the twin did not peel alike, so the lacked ops lower the range's low end by one
trip each and never the split. Small hand-written modules: a loop of two trips whose body computes
a weight gradient (stacked) and an input gradient (carried), and a peeled trip after it."""

from __future__ import annotations

import hloparse
from hloflops.accounting import account
from hloflops.remat.peeled_iterations import peeled_iteration_drops

_BODY = "jit(loss)/transpose(jvp())/while/body"
_RECOMPUTE = f"{_BODY}/closed_call/checkpoint/rematted_computation/sin"
_DOT = 'metadata={op_name="' + _BODY + '/closed_call/checkpoint/dot_general"}'


_TRIPS = 'backend_config={"known_trip_count":{"n":"2"}}'


def _outer_loop(peeled: str) -> str:
    """The backward layer loop around %body (2 trips) and the entry, ending in the peeled trip."""
    return f"""%cond (c: (s32[], f32[8], f32[8,16])) -> pred[] {{
  %c = (s32[], f32[8]{{0}}, f32[8,16]{{1,0}}) parameter(0)
  %ci = s32[] get-tuple-element(%c), index=0
  %lim = s32[] constant(2)
  ROOT %lt = pred[] compare(%ci, %lim), direction=LT
}}

ENTRY %main (x: f32[8], k: f32[8,16]) -> f32[16] {{
  %x = f32[8]{{0}} parameter(0)
  %k = f32[8,16]{{1,0}} parameter(1)
  %zero = s32[] constant(0)
  %init = (s32[], f32[8]{{0}}, f32[8,16]{{1,0}}) tuple(%zero, %x, %k)
  %loop = (s32[], f32[8]{{0}}, f32[8,16]{{1,0}}) while(%init), condition=%cond, body=%body, {_TRIPS}
  %lg = f32[8]{{0}} get-tuple-element(%loop), index=1
{peeled}}}"""


def _module(peeled: str) -> str:
    return f"""HloModule m, is_scheduled=true

%add (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}}

%grads (p0: f32[8], p1: f32[8,16]) -> (f32[16], f32[8]) {{
  %p0 = f32[8]{{0}} parameter(0)
  %p1 = f32[8,16]{{1,0}} parameter(1)
  %r = f32[8]{{0}} sine(%p0), metadata={{op_name="{_RECOMPUTE}"}}
  %b = f32[8,16]{{1,0}} broadcast(%r), dimensions={{0}}
  %m = f32[8,16]{{1,0}} multiply(%b, %p1)
  %z = f32[] constant(0)
  %w = f32[16]{{0}} reduce(%m, %z), dimensions={{0}}, to_apply=%add, {_DOT}
  %m2 = f32[8,16]{{1,0}} multiply(%p1, %p1)
  %x = f32[8]{{0}} reduce(%m2, %z), dimensions={{1}}, to_apply=%add, {_DOT}
  ROOT %t = (f32[16]{{0}}, f32[8]{{0}}) tuple(%w, %x)
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

%body (s: (s32[], f32[8], f32[8,16])) -> (s32[], f32[8], f32[8,16]) {{
  %s = (s32[], f32[8]{{0}}, f32[8,16]{{1,0}}) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %g = f32[8]{{0}} get-tuple-element(%s), index=1
  %k = f32[8,16]{{1,0}} get-tuple-element(%s), index=2
  %f = (f32[16]{{0}}, f32[8]{{0}}) fusion(%g, %k), kind=kLoop, calls=%grads, {_DOT}
  %dx = f32[8]{{0}} get-tuple-element(%f), index=1
  %one = s32[] constant(1)
  %n = s32[] add(%i, %one), metadata={{op_name="{_BODY}/add"}}
  ROOT %o = (s32[], f32[8]{{0}}, f32[8,16]{{1,0}}) tuple(%n, %dx, %k)
}}

{_outer_loop(peeled)}
"""


# The peeled last trip: only the weight gradient, the carried input gradient being dead after it.
_PEELED = f"""  ROOT %last = f32[16]{{0}} fusion(%lg, %k), kind=kLoop, calls=%weight_grad, {_DOT}
"""
# No peeled trip: the loop's output read by an op of the forward's own.
_UNPEELED = """  %b = f32[8,16]{1,0} broadcast(%lg), dimensions={0}
  %z = f32[] constant(0)
  ROOT %last = f32[16]{0} reduce(%b, %z), dimensions={0}, to_apply=%add,
    metadata={op_name="jit(loss)/jvp()/reduce_sum"}
"""


def test_a_peeled_trip_lacking_the_carried_gradient_hinges_on_it():
    found = peeled_iteration_drops(hloparse.parse(_module(_PEELED)))
    # The input gradient's multiply and reduce, one trip of two each; not the loop's counter add.
    assert found == {("grads", "m2"): 2, ("grads", "x"): 2}, found


def test_no_peeled_trip_no_hinge():
    assert peeled_iteration_drops(hloparse.parse(_module(_UNPEELED))) == {}


def test_the_hinge_lowers_the_range_by_one_trip_and_never_the_split():
    plain = account(hloparse.parse(_module(_PEELED)))
    low, high = plain.remat_flops_bounds
    # One trip of the input gradient: a multiply of 128 and a reduce of 8 * 15.
    trip = 128 + 8 * 15
    hinges = [h for h in plain.remat_hinges if h.twin_copies]
    assert sorted((h.name, h.flops) for h in hinges) == [("m2", 128), ("x", 120)], hinges
    assert high - low >= trip
    assert low == plain.remat_flops - trip - sum(h.flops for h in plain.remat_hinges
                                                  if h.counted and not h.twin_copies)


# Xtpu 418 (scan, tanh MLP, offload policy, tensor parallel): each trip computes layer 0's input
# gradient as a windowed einsum, a loop of its own inside the trip (`while` named for its matmul);
# the peeled trip drops that whole inner loop. The walk once stopped at loops a trip runs, so the
# dropped convolution was no hinge and the range's low end stayed 16,384 above the truth.
_WINDOWS = 'backend_config={"known_trip_count":{"n":"2"}}'


def _windowed_module(peeled: str) -> str:
    return f"""HloModule m, is_scheduled=true

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

%window_body (v: (s32[], f32[8], f32[8,16])) -> (s32[], f32[8], f32[8,16]) {{
  %v = (s32[], f32[8]{{0}}, f32[8,16]{{1,0}}) parameter(0)
  %j = s32[] get-tuple-element(%v), index=0
  %acc = f32[8]{{0}} get-tuple-element(%v), index=1
  %k = f32[8,16]{{1,0}} get-tuple-element(%v), index=2
  %m2 = f32[8,16]{{1,0}} multiply(%k, %k), {_DOT}
  %z = f32[] constant(0)
  %x = f32[8]{{0}} reduce(%m2, %z), dimensions={{1}}, to_apply=%add, {_DOT}
  %sum = f32[8]{{0}} add(%acc, %x), {_DOT}
  %one = s32[] constant(1)
  %n = s32[] add(%j, %one)
  ROOT %o = (s32[], f32[8]{{0}}, f32[8,16]{{1,0}}) tuple(%n, %sum, %k)
}}

%window_cond (w: (s32[], f32[8], f32[8,16])) -> pred[] {{
  %w = (s32[], f32[8]{{0}}, f32[8,16]{{1,0}}) parameter(0)
  %wi = s32[] get-tuple-element(%w), index=0
  %lim = s32[] constant(2)
  ROOT %lt = pred[] compare(%wi, %lim), direction=LT
}}

%body (s: (s32[], f32[8], f32[8,16])) -> (s32[], f32[8], f32[8,16]) {{
  %s = (s32[], f32[8]{{0}}, f32[8,16]{{1,0}}) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %g = f32[8]{{0}} get-tuple-element(%s), index=1
  %k = f32[8,16]{{1,0}} get-tuple-element(%s), index=2
  %w = f32[16]{{0}} fusion(%g, %k), kind=kLoop, calls=%weight_grad, {_DOT}
  %zero = s32[] constant(0)
  %start = (s32[], f32[8]{{0}}, f32[8,16]{{1,0}}) tuple(%zero, %g, %k)
  %windows = (s32[], f32[8]{{0}}, f32[8,16]{{1,0}}) while(%start), condition=%window_cond,
    body=%window_body, {_DOT}, {_WINDOWS}
  %dx = f32[8]{{0}} get-tuple-element(%windows), index=1
  %one = s32[] constant(1)
  %n = s32[] add(%i, %one), metadata={{op_name="{_BODY}/add"}}
  ROOT %o = (s32[], f32[8]{{0}}, f32[8,16]{{1,0}}) tuple(%n, %dx, %k)
}}

{_outer_loop(peeled)}
"""


def test_a_peeled_trip_lacking_a_window_loop_hinges_on_its_ops():
    module = hloparse.parse(_windowed_module(_PEELED))
    found = peeled_iteration_drops(module)
    # The inner loop's multiply, reduce and accumulation add, per trip of the layer loop (2).
    assert found == {("window_body", "m2"): 2, ("window_body", "x"): 2, ("window_body", "sum"): 2}, found
    hinges = {h.name: h.flops for h in account(module).remat_hinges if h.twin_copies}
    # One layer trip of the window loop: 2 windows of (128 + 8 * 15 + 8).
    assert hinges == {"m2": 2 * 128, "x": 2 * 120, "sum": 2 * 8}, hinges


def test_a_window_loop_the_peeled_trip_keeps_is_no_hinge():
    # The peeled trip runs the window loop too (the gradient read after the loop): nothing dropped.
    kept = f"""  %zero2 = s32[] constant(0)
  %start = (s32[], f32[8]{{0}}, f32[8,16]{{1,0}}) tuple(%zero2, %lg, %k)
  %windows = (s32[], f32[8]{{0}}, f32[8,16]{{1,0}}) while(%start), condition=%window_cond,
    body=%window_body2, {_DOT}, {_WINDOWS}
  %dx = f32[8]{{0}} get-tuple-element(%windows), index=1
  %w = f32[16]{{0}} fusion(%lg, %k), kind=kLoop, calls=%weight_grad, {_DOT}
  ROOT %t = (f32[16]{{0}}, f32[8]{{0}}) tuple(%w, %dx)
"""
    text = _windowed_module(kept).replace("%window_cond (w:", _second_window_body() + "\n%window_cond (w:")
    text = text.replace("-> f32[16] {\n  %x = f32[8]{0} parameter(0)", "-> (f32[16], f32[8]) {\n"
                        "  %x = f32[8]{0} parameter(0)")
    assert peeled_iteration_drops(hloparse.parse(text)) == {}


def _second_window_body() -> str:
    """The peeled trip's own copy of the window loop's body (XLA clones a loop it peels)."""
    return f"""%window_body2 (v: (s32[], f32[8], f32[8,16])) -> (s32[], f32[8], f32[8,16]) {{
  %v = (s32[], f32[8]{{0}}, f32[8,16]{{1,0}}) parameter(0)
  %j = s32[] get-tuple-element(%v), index=0
  %acc = f32[8]{{0}} get-tuple-element(%v), index=1
  %k = f32[8,16]{{1,0}} get-tuple-element(%v), index=2
  %m2 = f32[8,16]{{1,0}} multiply(%k, %k), {_DOT}
  %z = f32[] constant(0)
  %x = f32[8]{{0}} reduce(%m2, %z), dimensions={{1}}, to_apply=%add, {_DOT}
  %sum = f32[8]{{0}} add(%acc, %x), {_DOT}
  %one = s32[] constant(1)
  %n = s32[] add(%j, %one)
  ROOT %o = (s32[], f32[8]{{0}}, f32[8,16]{{1,0}}) tuple(%n, %sum, %k)
}}
"""
