"""A forward windowed einsum whose recompute all-gathers its own operand under the recompute's name
(haiku, held-out TPU 99: `checkpoint/rematted_computation/linear_4/dot_general`) is one the program
without remat runs as a plain matmul: its gather of the activation serves the forward matmul and
the weight gradient, where with remat the weight gradient reads the recompute's gathered copy
(analysis/hloflops/remat/regathered_windowed_einsums.py; 99's window loops' add and select, 1,024
each, were model FLOPs and the draw out of range)."""

from __future__ import annotations

import hloparse
from hloflops.remat.regathered_windowed_einsums import regathered_windowed_einsums
from hloflops.remat.sites import SiteOp

HLO = """HloModule windows, is_scheduled=true

body {
  st = (s32[], f32[2,8], bf16[2,4], bf16[4,8]) parameter(0)
  n = s32[] get-tuple-element(st), index=0
  acc = f32[2,8] get-tuple-element(st), index=1
  x = bf16[2,4] get-tuple-element(st), index=2
  w = bf16[4,8] get-tuple-element(st), index=3
  d = f32[2,8] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0},
    metadata={op_name="jit(loss)/jvp(linear_4)/dot_general"}
  zero = s32[] constant(0)
  first = pred[] compare(n, zero), direction=EQ
  fb = pred[2,8] broadcast(first), dimensions={}
  z = f32[] constant(0)
  zb = f32[2,8] broadcast(z), dimensions={}
  kept = f32[2,8] select(fb, zb, acc)
  sum = f32[2,8] add(kept, d)
  xp = bf16[2,4] collective-permute(x), source_target_pairs={{0,1},{1,0}},
    metadata={op_name="jit(loss)/jvp(linear_4)/dot_general"}
  one = s32[] constant(1)
  n1 = s32[] add(n, one)
  ROOT out = (s32[], f32[2,8], bf16[2,4], bf16[4,8]) tuple(n1, sum, xp, w)
}

cond {
  st = (s32[], f32[2,8], bf16[2,4], bf16[4,8]) parameter(0)
  n = s32[] get-tuple-element(st), index=0
  k = s32[] constant(2)
  ROOT lt = pred[] compare(n, k), direction=LT
}

ENTRY main {
  x0 = bf16[2,4] parameter(0)
  w0 = bf16[4,8] parameter(1)
  r = bf16[2,4] parameter(2)
  zero = s32[] constant(0)
  acc0 = f32[2,8] broadcast(f32[] constant(0)), dimensions={}
  init = (s32[], f32[2,8], bf16[2,4], bf16[4,8]) tuple(zero, acc0, x0, w0)
  loop = (s32[], f32[2,8], bf16[2,4], bf16[4,8]) while(init), condition=cond, body=body,
    metadata={op_name="@LOOP"}
  g = bf16[4,4] all-gather(r), dimensions={0}, replica_groups={{0,1}},
    metadata={op_name="@GATHER"}
  ROOT y = f32[2,8] get-tuple-element(loop), index=1
}
"""


def _counted(gather: str, loop: str = "jit(loss)/jvp(linear_4)/dot_general") -> set[str]:
    module = hloparse.parse(HLO.replace("@GATHER", gather).replace("@LOOP", loop))
    body = module.by_name["body"]
    ops = [SiteOp(("body", inst.name, 0), inst, inst.op_name, False, False, i, None, None, "body")
           for i, inst in enumerate(body.instructions) if inst.opcode in ("select", "add", "dot")]
    counted, _ = regathered_windowed_einsums(module, ops)
    return {key[1] for key in counted}


def test_a_window_loop_whose_matmul_the_recompute_gathers_for_runs_because_of_remat():
    name = "jit(loss)/transpose(jvp(jvp()))/checkpoint/rematted_computation/linear_4/dot_general"
    assert _counted(name) == {"kept", "sum", "n1"}


def test_a_recompute_gathering_for_another_matmul_leaves_the_loop():
    name = "jit(loss)/transpose(jvp(jvp()))/checkpoint/rematted_computation/linear_2/dot_general"
    assert _counted(name) == set()


def test_a_scan_loop_holding_the_matmul_is_no_window_loop():
    # nnx.scan under FSDP (held-out TPU 113): the layer loop holds the matmul and permutes, and
    # the recompute gathers its weight; the loop is the model's, named for the scan.
    name = "jit(loss)/transpose(jvp(jvp()))/checkpoint/rematted_computation/linear_4/dot_general"
    assert _counted(name, loop="jit(loss)/jvp()/while") == set()
