"""A linearization coefficient recomputed in a backward loop's gradient fusions
(hloflops.remat.fusion_copies, `_linearization_coefficients`).

The forward of a checkpointed block computes only the primal; jax's linearization coefficients
(tanh's `1 - t`, sigmoid's `s * (1 - s)`) are computed by the recompute alone, under its name.
The program without remat computes each in its forward, once, into the residual it saves, and its
backward loop reads it stored. The program with remat recomputes it in the backward loop, and XLA
copies it into every gradient fusion that reads it: all copies but the one counted as model FLOPs
run because of remat. A copy of a forward value (gelu's `1 + tanh`, which the program without
remat may copy into several of its saving fusions) stays unsure."""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat

# A backward loop body: the recompute's tanh, and two gradient fusions that each copy `1 - t`.
BACKWARD_LOOP = """HloModule backward_loop_coefficient, is_scheduled=true

recompute_tanh {
  r0 = f32[8,16] parameter(0)
  ROOT rt = f32[8,16] tanh(r0), metadata={op_name="@R/tanh"}
}

gradient_a {
  a0 = f32[8,16] parameter(0)
  a1 = f32[8,16] parameter(1)
  one = f32[] constant(1)
  ones = f32[8,16] broadcast(one), dimensions={}
  sa = f32[8,16] subtract(ones, a0), metadata={op_name="@R/sub"}
  ma = f32[8,16] multiply(a1, sa), metadata={op_name="@B/mul"}
  ROOT aa = f32[8,16] add(ma, a1), metadata={op_name="@B/add_any"}
}

gradient_b {
  b0 = f32[8,16] parameter(0)
  b1 = f32[8,16] parameter(1)
  one = f32[] constant(1)
  ones = f32[8,16] broadcast(one), dimensions={}
  sb = f32[8,16] subtract(ones, b0), metadata={op_name="@R/sub"}
  mb = f32[8,16] multiply(b1, sb), metadata={op_name="@B/mul"}
  ROOT bb = f32[8,16] multiply(mb, b0), metadata={op_name="@B/mul"}
}

body {
  st = (s32[], f32[8,16], f32[8,16], f32[8,16]) parameter(0)
  i = s32[] get-tuple-element(st), index=0
  x = f32[8,16] get-tuple-element(st), index=1
  g = f32[8,16] get-tuple-element(st), index=2
  t = f32[8,16] fusion(x), kind=kLoop, calls=recompute_tanh
  da = f32[8,16] fusion(t, g), kind=kLoop, calls=gradient_a
  db = f32[8,16] fusion(t, da), kind=kLoop, calls=gradient_b
  c1 = s32[] constant(1)
  i1 = s32[] add(i, c1), metadata={op_name="@L/add"}
  ROOT out = (s32[], f32[8,16], f32[8,16], f32[8,16]) tuple(i1, x, db, da)
}

cond {
  cs = (s32[], f32[8,16], f32[8,16], f32[8,16]) parameter(0)
  ci = s32[] get-tuple-element(cs), index=0
  n = s32[] constant(4)
  ROOT lt = pred[] compare(ci, n), direction=LT, metadata={op_name="@L/lt"}
}

ENTRY main {
  x0 = f32[8,16] parameter(0)
  g0 = f32[8,16] parameter(1)
  y = f32[8,16] tanh(x0), metadata={op_name="@F/tanh"}
  z = s32[] constant(0)
  init = (s32[], f32[8,16], f32[8,16], f32[8,16]) tuple(z, x0, g0, g0)
  w = (s32[], f32[8,16], f32[8,16], f32[8,16]) while(init), condition=cond, body=body
  r = f32[8,16] get-tuple-element(w), index=3
  ROOT o = (f32[8,16], f32[8,16]) tuple(y, r)
}
"""


def _parsed(text: str):
    """The module, its op_name prefixes written out: @F the forward, @R the checkpoint's
    recompute in the backward loop, @B its backward, @L the loop's own counter."""
    for short, long in (("@R", "jit(loss)/transpose(jvp(f))/while/body/checkpoint/rematted_computation"),
                        ("@B", "jit(loss)/transpose(jvp(f))/while/body/checkpoint"),
                        ("@L", "jit(loss)/transpose(jvp(f))/while/body"), ("@F", "jit(loss)/jvp(f)")):
        text = text.replace(short, long)
    return hloparse.parse(text)


def test_a_coefficient_copied_into_two_gradient_fusions_of_a_backward_loop_runs_once_because_of_remat():
    index = find_remat(_parsed(BACKWARD_LOOP))
    copies = {("gradient_a", "sa"), ("gradient_b", "sb")}
    assert len(copies & index.remat) == 1  # one copy is the model's, saved once without remat
    assert not copies & (index.weak | index.unsure)  # sure: not a hinge of the range


def test_a_coefficient_computed_once_is_model_work():
    # Only one gradient fusion copies it: the program without remat computes it once too.
    text = BACKWARD_LOOP.replace("  db = f32[8,16] fusion(t, da), kind=kLoop, calls=gradient_b\n", "").replace(
        "tuple(i1, x, db, da)", "tuple(i1, x, da, da)")
    index = find_remat(_parsed(text))
    assert ("gradient_a", "sa") not in index.remat


# Sigmoid's coefficient `s * (1 - s)`, copied into two gradient fusions of the backward loop, where
# the forward (ENTRY, another frame) has a multiply of the same signature and name: `f * c`, not
# this value, for it never computes `1 - s`.
SIGMOID_LOOP = BACKWARD_LOOP
for _g in ("a", "b"):
    SIGMOID_LOOP = SIGMOID_LOOP.replace(
        f"  m{_g} = f32[8,16] multiply({_g}1, s{_g}), ",
        f'  c{_g} = f32[8,16] multiply({_g}0, s{_g}), metadata={{op_name="@R/mul"}}\n'
        f"  m{_g} = f32[8,16] multiply({_g}1, c{_g}), ")
SIGMOID_LOOP = SIGMOID_LOOP.replace(
    """  y = f32[8,16] tanh(x0), metadata={op_name="@F/tanh"}""",
    """  y0 = f32[8,16] tanh(x0), metadata={op_name="@F/tanh"}
  y = f32[8,16] multiply(y0, g0), metadata={op_name="@F/mul"}""")


def test_a_value_computed_from_a_coefficient_runs_once_more_than_without_remat():
    # hloflops.remat.fusion_copies: the forward's `mul` of this signature is no copy of `s * (1 - s)`
    # (held-out base draw 221, a BiLSTM: multiply -24,576); the program without remat computes it
    # once, saving it, so one of the two copies is recompute.
    index = find_remat(_parsed(SIGMOID_LOOP))
    assert SIGMOID_LOOP.count('op_name="@R/mul"') == 2
    copies = {("gradient_a", "ca"), ("gradient_b", "cb")}
    assert len(copies & index.remat) == 1
    assert len({("gradient_a", "sa"), ("gradient_b", "sb")} & index.remat) == 1
