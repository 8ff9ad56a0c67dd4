"""A cast only the recompute reads, its forward's shape one unit dimension wider (issue 28, round
19; hloflops.remat.recompute_only_casts, by_signature's unit-free fallback). A `linen_scan`'s forward
loop slices a layer's f32 bias from the stacked parameters and casts it to bf16 as `[1, h]`; the
backward loop's recompute slices the same stack (at `n - 1 - i`) and XLA bitcasts the slice to
`[h]` before the cast. No value number nor signature matched the two, and the recompute's cast
was left out of remat (more 60: Conv_0's bias, convert -128; more 73: attention's four biases).
The program without remat casts a bias only in its forward: its backward never reads the bias.
A cast the backward's gradient work reads too (a weight's, for the input gradient) that program
casts in its backward as well, and the fallback leaves it alone."""

from __future__ import annotations

import hloparse
from hloflops.accounting import account

_FWD = "jit(loss)/jvp(Net)/stack/while/body/closed_call/blocks/block/Conv_0"
_BWD = "jit(loss)/transpose(jvp(Net))/stack/while/body/closed_call/checkpoint"
_RECOMPUTE = _BWD + "/rematted_computation/blocks/block/Conv_0"


def _two_loops(gradient_reads_the_cast: bool, saved_stack: bool = False) -> str:
    meta = lambda name: f'metadata={{op_name="{name}"}}'  # noqa: E731
    state = "(s32[], f32[2,64]{1,0}, bf16[4,64]{1,0})"
    grad = f"""
  gm = bf16[4,64]{{1,0}} multiply(x.b, bb.b), {meta(_BWD + "/blocks/block/Conv_0/mul")}
  y.b = bf16[4,64]{{1,0}} add(add.b, gm), {meta(_BWD + "/blocks/block/add_any")}""" if gradient_reads_the_cast \
        else f"""
  y.b = bf16[4,64]{{1,0}} add(add.b, x.b), {meta(_BWD + "/blocks/block/add_any")}"""
    # the backward slicing a stack the forward loop wrote (a residual it saved), not the parameters
    stack = "stack = f32[2,64]{1,0} " + ("get-tuple-element(fwd), index=1" if saved_stack else "copy(b)")
    return f"""
HloModule casts, is_scheduled=true

cond {{
  s = {state} parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(2)
  ROOT more = pred[] compare(i, n), direction=LT
}}

forward {{
  s.f = {state} parameter(0)
  i.f = s32[] get-tuple-element(s.f), index=0
  b.f = f32[2,64]{{1,0}} get-tuple-element(s.f), index=1
  x.f = bf16[4,64]{{1,0}} get-tuple-element(s.f), index=2
  zero.f = s32[] constant(0)
  one.f = s32[] constant(1)
  next.f = s32[] add(i.f, one.f)
  ds.f = f32[1,64]{{1,0}} dynamic-slice(b.f, i.f, zero.f), dynamic_slice_sizes={{1,64}}
  cast.f = bf16[1,64]{{1,0}} convert(ds.f), {meta(_FWD + "/convert_element_type")}
  view.f = bf16[64]{{0}} bitcast(cast.f)
  bb.f = bf16[4,64]{{1,0}} broadcast(view.f), dimensions={{1}}, {meta(_FWD + "/add")}
  add.f = bf16[4,64]{{1,0}} add(x.f, bb.f), {meta(_FWD + "/add")}
  w.f = f32[2,64]{{1,0}} add(b.f, b.f)
  ROOT out.f = {state} tuple(next.f, w.f, add.f)
}}

backward {{
  s.b = {state} parameter(0)
  i.b = s32[] get-tuple-element(s.b), index=0
  b.b = f32[2,64]{{1,0}} get-tuple-element(s.b), index=1
  x.b = bf16[4,64]{{1,0}} get-tuple-element(s.b), index=2
  zero.b = s32[] constant(0)
  one.b = s32[] constant(1)
  next.b = s32[] add(i.b, one.b)
  j.b = s32[] subtract(one.b, i.b)
  ds.b = f32[1,64]{{1,0}} dynamic-slice(b.b, j.b, zero.b), dynamic_slice_sizes={{1,64}}
  view.b = f32[64]{{0}} bitcast(ds.b)
  cast.b = bf16[64]{{0}} convert(view.b), {meta(_RECOMPUTE + "/convert_element_type")}
  bb.b = bf16[4,64]{{1,0}} broadcast(cast.b), dimensions={{1}}, {meta(_RECOMPUTE + "/add")}
  add.b = bf16[4,64]{{1,0}} add(x.b, bb.b), {meta(_RECOMPUTE + "/add")}{grad}
  ROOT out.b = {state} tuple(next.b, b.b, y.b)
}}

ENTRY main {{
  b = f32[2,64]{{1,0}} parameter(0)
  x = bf16[4,64]{{1,0}} parameter(1)
  zero = s32[] constant(0)
  init = {state} tuple(zero, b, x)
  fwd = {state} while(init), condition=cond, body=forward
  h = bf16[4,64]{{1,0}} get-tuple-element(fwd), index=2
  {stack}
  init.b = {state} tuple(zero, stack, h)
  bwd = {state} while(init.b), condition=cond, body=backward
  ROOT g = bf16[4,64]{{1,0}} get-tuple-element(bwd), index=2
}}
"""


def _remat(text: str) -> set[str]:
    return {r.name for r in account(hloparse.parse(text), xla={"flops": 0.0}).rows if r.remat}


def test_a_bias_cast_only_the_recompute_reads_pairs_with_its_wider_forward_cast():
    remat = _remat(_two_loops(gradient_reads_the_cast=False))
    assert "cast.b" in remat and "cast.f" not in remat


def test_a_cast_the_gradient_reads_too_is_left_to_the_cast_counts():
    assert "cast.b" not in _remat(_two_loops(gradient_reads_the_cast=True))


def test_a_cast_of_a_stack_the_forward_saved_is_left_to_the_cast_counts():
    # base draw 235 (`linen_remat_scan`): an inner loop's carry, read back from its saved stack and
    # rounded for the recompute; the program without remat rounds it in its backward too
    assert "cast.b" not in _remat(_two_loops(gradient_reads_the_cast=False, saved_stack=True))
