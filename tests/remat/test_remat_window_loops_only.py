"""Only a windowed einsum's own loop is taken for one a regathered forward matmul made
(analysis/hloflops/remat/regathered_windowed_einsums.py), never a model's loop around matmuls.

TPU draw 231 (plain jax gradient accumulation, tensor parallel, two microbatches a trip): the
backward gathers a recompute for `transpose(jvp())/dot_general`, so every matmul named
`dot_general` counted as regathered, and the microbatch loop `jit(step)/while`, which holds
matmuls and collective-permutes, was taken for a window loop: everything in it but the matmuls,
forward and backward alike, counted remat (multiply +3,421,194, add +1,249,282, reported
25,016,345 against a truth of 18,708,480). XLA names the loop it builds for a matmul after that
matmul; the microbatch loop runs matmuls of other names."""

from __future__ import annotations

import hloparse
from hloflops.remat.regathered_windowed_einsums import regathered_windowed_einsums
from hloflops.remat.sites import SiteOp

HLO = """HloModule loops, is_scheduled=true

cond {
  c = (s32[], f32[8,8]) parameter(0)
  i = s32[] get-tuple-element(c), index=0
  n = s32[] constant(2)
  ROOT lt = pred[] compare(i, n), direction=LT
}

@BODY {
  b = (s32[], f32[8,8]) parameter(0)
  i = s32[] get-tuple-element(b), index=0
  x = f32[8,8] get-tuple-element(b), index=1
  p = f32[8,8] collective-permute(x), source_target_pairs={{0,1},{1,0}}
  d = f32[8,8] dot(p, x), lhs_contracting_dims={1}, rhs_contracting_dims={0},
    metadata={op_name="@DOT"}
  s = f32[8,8] add(d, x), metadata={op_name="@DOT"}
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[], f32[8,8]) tuple(j, s)
}

ENTRY main {
  a = f32[8,8] parameter(0)
  r = f32[8,8] multiply(a, a), metadata={op_name="jit(step)/transpose(jvp())/checkpoint/rematted_computation/mul"}
  g = f32[16,8] all-gather(r), dimensions={0}, metadata={op_name="jit(step)/transpose(jvp())/dot_general"}
  z = s32[] constant(0)
  t0 = (s32[], f32[8,8]) tuple(z, a)
  ROOT w = (s32[], f32[8,8]) while(t0), condition=cond, body=@BODY, metadata={op_name="@LOOP"}
}
"""


def _counted(loop_name: str, dot_name: str) -> set[str]:
    text = HLO.replace("@BODY", "body").replace("@LOOP", loop_name).replace("@DOT", dot_name)
    module = hloparse.parse(text)
    body = module.by_name["body"]
    ops = [SiteOp((body.name, inst.name, 0), inst, "", False, False, k, None, None, body.name)
           for k, inst in enumerate(body.instructions)]
    counted, _ = regathered_windowed_einsums(module, ops)
    return {key[1] for key in counted}


def test_a_window_loop_named_as_its_matmul_is_counted():
    assert {"s", "j"} <= _counted("jit(step)/jvp()/dot_general", "jit(step)/jvp()/dot_general")


def test_a_microbatch_loop_around_matmuls_is_not_a_window_loop():
    assert _counted("jit(step)/while", "jit(step)/while/body/closed_call/jvp()/dot_general") == set()
