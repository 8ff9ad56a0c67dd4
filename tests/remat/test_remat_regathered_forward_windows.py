"""A forward window loop whose activation the backward all-gathers again, under the transpose's
name, in the loop's own frame runs because of remat (analysis/hloflops/remat/regathered_forward_windows.py).

TPU draw 211 (jax.checkpoint in a scan unrolled into one frame, tensor parallel): the program
without remat gathers each layer's input once for the forward matmul and the weight gradient and
runs one matmul; with remat the backward gathers the saved residual apart, and the forward matmul
became a window loop whose accumulating adds, first-trip selects and counters (2,086 FLOPs) were
counted model FLOPs: the draw was out of range (reported 3,072, truth 5,158, bounds [1,520, 3,584]).
Where the backward gathers another value, or in another frame (a scan's backward loop: TPU 38, 44),
the program without remat keeps its window loop too and nothing is counted."""

from __future__ import annotations

import hloparse
from hloflops.remat.regathered_forward_windows import regathered_forward_windows
from hloflops.remat.sites import SiteOp

HLO = """HloModule windows, is_scheduled=true

cond {
  c = (s32[], f32[8,8], f32[8,8]) parameter(0)
  i = s32[] get-tuple-element(c), index=0
  n = s32[] constant(2)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  b = (s32[], f32[8,8], f32[8,8]) parameter(0)
  i = s32[] get-tuple-element(b), index=0
  x = f32[8,8] get-tuple-element(b), index=1
  acc = f32[8,8] get-tuple-element(b), index=2
  p = f32[8,8] collective-permute(x), source_target_pairs={{0,1},{1,0}}
  d = f32[8,8] dot(p, x), lhs_contracting_dims={1}, rhs_contracting_dims={0},
    metadata={op_name="jit(loss)/jvp()/closed_call/dot_general"}
  s = f32[8,8] add(d, acc), metadata={op_name="jit(loss)/jvp()/closed_call/dot_general"}
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[], f32[8,8], f32[8,8]) tuple(j, p, s)
}

ENTRY main {
  a = f32[8,8] parameter(0)
  h = f32[8,8] multiply(a, a), metadata={op_name="jit(loss)/jvp()/closed_call/mul"}
  @GATHERED
  g = f32[16,8] all-gather(v), dimensions={0},
    metadata={op_name="jit(loss)/transpose(jvp())/closed_call/checkpoint/dot_general"}
  z = s32[] constant(0)
  zero = f32[8,8] broadcast(f32[] constant(0)), dimensions={}
  t0 = (s32[], f32[8,8], f32[8,8]) tuple(z, h, zero)
  ROOT w = (s32[], f32[8,8], f32[8,8]) while(t0), condition=cond, body=body,
    metadata={op_name="jit(loss)/jvp()/closed_call/dot_general"}
}
"""


def _counted(gathered: str) -> set[str]:
    module = hloparse.parse(HLO.replace("@GATHERED", gathered))
    body = module.by_name["body"]
    ops = [SiteOp((body.name, inst.name, 0), inst, "", False, False, k, None, None, body.name)
           for k, inst in enumerate(body.instructions)]
    counted, _ = regathered_forward_windows(module, ops)
    return {key[1] for key in counted}


def test_a_window_loop_whose_activation_the_backward_gathers_again_is_remat():
    # The backward's gather reads the loop's activation narrowed and reshaped, as TPU 211's does.
    assert {"s", "j"} <= _counted("n1 = bf16[8,8] convert(h)\n  v = bf16[8,8] bitcast(n1)") - {"d"}
    assert "d" not in _counted("v = f32[8,8] copy(h)")  # the matmul is the program without remat's


def test_a_window_loop_whose_activation_the_backward_does_not_gather_is_not():
    assert _counted("v = f32[8,8] add(a, a)") == set()
