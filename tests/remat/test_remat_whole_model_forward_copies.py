"""The forward's copies of a checkpointed value under a checkpoint around the whole model (after
optimization, CPU; analysis/hloflops/remat/whole_checkpoint_widens.py, `_forward_copies`).

A whole-model checkpoint's forward stores nothing but the policy's residuals: XLA copies a cheap
value such as a residual sum `x + h` into every fusion reading it (a layer norm's mean, its
variance, the next block's input), where the recompute, whose value the backward reads, computes
and stores it once, as the program without remat's forward does. So every forward copy runs
because of remat, not only as many as the recompute makes (base 83: add -6,144; held-out base 289:
add -12,288). A value that only gradient fusions recompute (a head's bias add, copied into the loss
gradient's fusions) is one that program's forward computes as this one's does, for the loss: its
forward copy stays model FLOPs. Handwritten: no jax needed."""

from __future__ import annotations

import hloparse
from hloflops.accounting import account

FWD = "jit(loss)/jvp(LM)/block_0"
REC = "jit(loss)/transpose(jvp(jvp(LM)))/checkpoint/rematted_computation/LM/block_0"
BWD = "jit(loss)/transpose(jvp(jvp(LM)))/checkpoint/LM/block_0"


def _m(name: str) -> str:
    return f'metadata={{op_name="{name}"}}'


DOT = "lhs_contracting_dims={1}, rhs_contracting_dims={0}"
V = "f32[4,32]{1,0}"


TEXT = f"""
HloModule whole_model_forward_copies, is_scheduled=true

forward_tanh {{
  x = f32[4,32]{{1,0}} parameter(0)
  h = f32[4,32]{{1,0}} parameter(1)
  s = f32[4,32]{{1,0}} add(x, h), {_m(FWD + "/add")}
  ROOT t = f32[4,32]{{1,0}} tanh(s), {_m(FWD + "/tanh")}
}}

forward_square {{
  x = f32[4,32]{{1,0}} parameter(0)
  h = f32[4,32]{{1,0}} parameter(1)
  s2 = f32[4,32]{{1,0}} add(x, h), {_m(FWD + "/add")}
  ROOT q = f32[4,32]{{1,0}} multiply(s2, s2), {_m(FWD + "/mul")}
}}

forward_head {{
  h = f32[4,32]{{1,0}} parameter(0)
  ROOT hb = f32[4,32]{{1,0}} add(h, h), {_m(FWD + "/head/add")}
}}

recompute_sum {{
  x = f32[4,32]{{1,0}} parameter(0)
  h = f32[4,32]{{1,0}} parameter(1)
  ROOT rs = f32[4,32]{{1,0}} add(x, h), {_m(REC + "/add")}
}}

recompute_tanh {{
  s = f32[4,32]{{1,0}} parameter(0)
  ROOT rt = f32[4,32]{{1,0}} tanh(s), {_m(REC + "/tanh")}
}}

recompute_square {{
  s = f32[4,32]{{1,0}} parameter(0)
  ROOT rq = f32[4,32]{{1,0}} multiply(s, s), {_m(REC + "/mul")}
}}

head_gradient {{
  h = f32[4,32]{{1,0}} parameter(0)
  g = f32[4,32]{{1,0}} parameter(1)
  rhb = f32[4,32]{{1,0}} add(h, h), {_m(REC + "/head/add")}
  ROOT gb = f32[4,32]{{1,0}} multiply(rhb, g), {_m(BWD + "/head/mul")}
}}

ENTRY main {{
  x = f32[4,32]{{1,0}} parameter(0)
  w = f32[32,32]{{1,0}} parameter(1)
  g = f32[4,32]{{1,0}} parameter(2)
  h = {V} dot(x, w), {DOT}, {_m(FWD + "/Dense_0/dot_general")}
  ft = f32[4,32]{{1,0}} fusion(x, h), kind=kLoop, calls=forward_tanh
  fq = f32[4,32]{{1,0}} fusion(x, h), kind=kLoop, calls=forward_square
  fh = f32[4,32]{{1,0}} fusion(h), kind=kLoop, calls=forward_head
  rh = {V} dot(x, w), {DOT}, {_m(REC + "/Dense_0/dot_general")}
  rs = f32[4,32]{{1,0}} fusion(x, rh), kind=kLoop, calls=recompute_sum
  rt = f32[4,32]{{1,0}} fusion(rs), kind=kLoop, calls=recompute_tanh
  rq = f32[4,32]{{1,0}} fusion(rs), kind=kLoop, calls=recompute_square
  gt = f32[4,32]{{1,0}} multiply(g, rt), {_m(BWD + "/tanh_grad")}
  gq = f32[4,32]{{1,0}} multiply(g, rq), {_m(BWD + "/mul_grad")}
  gs = f32[4,32]{{1,0}} multiply(gt, rs), {_m(BWD + "/add_grad")}
  gb = f32[4,32]{{1,0}} fusion(rh, g), kind=kLoop, calls=head_gradient
  ROOT out = ({V}, {V}, {V}, {V}, {V}, {V}) tuple(ft, fq, fh, gs, gq, gb)
}}
"""


def _rows():
    acc = account(hloparse.parse(TEXT), xla={"flops": 0.0})
    return {(r.computation, r.name): r for r in acc.rows}, acc


def test_every_forward_copy_of_a_recomputed_residual_sum_is_remat():
    rows, _ = _rows()
    # The residual sum: two forward copies (in the tanh's and the square's fusions), one
    # recompute stored for the backward, as the program without remat's forward stores it: the
    # program with remat runs it twice more, counted on its forward's copies or its recompute.
    sums = [rows[key] for key in (("forward_tanh", "s"), ("forward_square", "s2"), ("recompute_sum", "rs"))]
    assert sum(r.remat_flops for r in sums) == 2 * 4 * 32, [(r.name, r.remat) for r in sums]


def test_a_value_only_gradient_fusions_recompute_keeps_its_forward_copy():
    rows, _ = _rows()
    # The head's add: the forward's copy feeds the loss in both programs; its recompute lives in a
    # gradient fusion, as the program without remat's backward copies it there too.
    assert not rows[("forward_head", "hb")].remat


def test_the_recompute_fusions_are_remat():
    rows, acc = _rows()
    assert rows[("recompute_tanh", "rt")].remat and rows[("recompute_square", "rq")].remat
    low, high = acc.remat_flops_bounds
    assert low <= acc.remat_flops <= high
