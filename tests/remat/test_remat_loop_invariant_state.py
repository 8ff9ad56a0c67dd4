"""A loop's state element that its body hands back unchanged (issue 28, round 13;
hloflops.remat.values). TPU carries an asynchronous all-gather's shard through the loop of a
windowed einsum (tensor parallel) to the fusion that finishes the gather after it: the while's
result element was a value of its own, so the recompute's convolution reading that gather matched
no forward value and was counted as model FLOPs (a `linen_loop` conv net: convolution
-554,696,704). After any number of trips such an element is the loop's initial value."""

from __future__ import annotations

import hloparse
from hloflops.accounting import account
from hloflops.remat.values import value_numbers


def _carried_through_a_loop() -> str:
    meta = lambda name: f'metadata={{op_name="jit(loss)/{name}"}}'  # noqa: E731
    return f"""
HloModule carried, is_scheduled=true

cond {{
  state = (s32[], f32[64,32]{{1,0}}, f32[8,32]{{1,0}}) parameter(0)
  i = s32[] get-tuple-element(state), index=0
  n = s32[] constant(4)
  ROOT more = pred[] compare(i, n), direction=LT
}}

body {{
  state.1 = (s32[], f32[64,32]{{1,0}}, f32[8,32]{{1,0}}) parameter(0)
  i.1 = s32[] get-tuple-element(state.1), index=0
  one = s32[] constant(1)
  next = s32[] add(i.1, one)
  w.1 = f32[64,32]{{1,0}} get-tuple-element(state.1), index=1
  acc = f32[8,32]{{1,0}} get-tuple-element(state.1), index=2
  acc.1 = f32[8,32]{{1,0}} add(acc, acc)
  ROOT out.1 = (s32[], f32[64,32]{{1,0}}, f32[8,32]{{1,0}}) tuple(next, w.1, acc.1)
}}

ENTRY main {{
  x = f32[8,64]{{1,0}} parameter(0)
  w = f32[64,32]{{1,0}} parameter(1)
  g = f32[8,32]{{1,0}} parameter(2)
  zero = s32[] constant(0)
  y = f32[8,32]{{1,0}} dot(x, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}},
      {meta("jvp()/dot_general")}
  init = (s32[], f32[64,32]{{1,0}}, f32[8,32]{{1,0}}) tuple(zero, w, g)
  loop = (s32[], f32[64,32]{{1,0}}, f32[8,32]{{1,0}}) while(init), condition=cond, body=body
  w.2 = f32[64,32]{{1,0}} get-tuple-element(loop), index=1
  g.2 = f32[8,32]{{1,0}} get-tuple-element(loop), index=2
  y.1 = f32[8,32]{{1,0}} dot(x, w.2), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}},
      {meta("transpose(jvp())/checkpoint/rematted_computation/dot_general")}
  d = f32[8,32]{{1,0}} multiply(y.1, g.2), {meta("transpose(jvp())/checkpoint/mul")}
  ROOT out = (f32[8,32]{{1,0}}, f32[8,32]{{1,0}}) tuple(y, d)
}}
"""


def test_a_state_element_the_body_hands_back_unchanged_is_the_loops_initial_value():
    values = value_numbers(hloparse.parse(_carried_through_a_loop())).exact
    assert values[("main", "w.2")] == values[("main", "w")]
    assert values[("main", "g.2")] != values[("main", "g")]  # the body changes it: a value of its own


def test_a_recompute_reading_a_value_carried_through_a_loop_pairs_with_its_forward():
    acc = account(hloparse.parse(_carried_through_a_loop()), xla={"flops": 0.0})
    remat = {r.name for r in acc.rows if r.remat}
    assert "y.1" in remat and not remat & {"y", "d"}
    assert acc.remat_flops_bounds[0] == acc.remat_flops_bounds[1]
