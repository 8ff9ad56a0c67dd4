"""An op XLA left without metadata is named by what it reads (analysis/hloflops/remat/marks.py,
`inherit_names`): a remat-named value and otherwise forward values make it the recompute's. A
program input (a parameter of the entry computation: a weight, the batch) is read by the
recompute as by the forward and is never a gradient, so it keeps the op the recompute's too. TPU
lowers a small matrix-vector product as `reduce(broadcast(v) * w)`, the multiply unnamed: the
recompute's read the recompute's broadcast and the weight, named `params[...]`, and was counted as
model FLOPs (TPU draw 31, an offloading loop under tensor parallelism: multiply -496 -> +16 after
optimization, now in range)."""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat

MATVEC = """HloModule matvec, is_scheduled=true

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

forward {
  f0 = f32[32,16] parameter(0)
  f1 = f32[32] parameter(1)
  fb = f32[32,16] broadcast(f1), dimensions={0}, metadata={op_name="@F/dot_general"}
  fm = f32[32,16] multiply(fb, f0)
  fz = f32[] constant(0)
  ROOT fr = f32[16] reduce(fm, fz), dimensions={0}, to_apply=add, metadata={op_name="@F/dot_general"}
}

recompute {
  r0 = f32[32,16] parameter(0)
  r1 = f32[32] parameter(1)
  rb = f32[32,16] broadcast(r1), dimensions={0}, metadata={op_name="@R/dot_general"}
  rm = f32[32,16] multiply(rb, r0)
  rz = f32[] constant(0)
  ROOT rr = f32[16] reduce(rm, rz), dimensions={0}, to_apply=add, metadata={op_name="@R/dot_general"}
}

ENTRY main {
  w = f32[32,16] parameter(0), metadata={op_name="params['up']['kernel']"}
  x = f32[32] parameter(1), metadata={op_name="x"}
  y = f32[16] fusion(w, x), kind=kLoop, calls=forward
  z = f32[16] fusion(w, x), kind=kLoop, calls=recompute
  ROOT out = (f32[16], f32[16]) tuple(y, z)
}
"""


def _parsed(text: str):
    """The module, its op_name prefixes written out: @F the forward, @R the checkpoint's recompute."""
    for short, long in (("@R", "jit(loss)/transpose(jvp(jvp()))/checkpoint/rematted_computation"),
                        ("@F", "jit(loss)/jvp()")):
        text = text.replace(short, long)
    return hloparse.parse(text)


def test_an_unnamed_op_reading_the_recompute_and_a_program_input_is_the_recomputes():
    remat = find_remat(_parsed(MATVEC)).remat
    assert {("recompute", "rm"), ("recompute", "rr")} <= remat
    assert not {("forward", "fm"), ("forward", "fr")} & remat
