"""A recompute's matmul whose forward the SPMD partitioner split into a windowed loop
(hloflops.remat.windowed_matmuls).

Hand-written after TPU draws 77 (flax's remat_scan, tensor parallelism) and 99 (haiku, a Python
loop of layers): the forward's `Dense_0` runs as a `while` named by its own `dot_general`, each
of two trips multiplying one window `[4,16] x [16,128]` (16,384 FLOPs) and passing the window on;
the recompute gathers the weight and runs `[4,32] x [32,128]` (32,768 FLOPs) once, in another
frame. Neither value, signature nor per-device FLOPs meet, so the recompute was left unpaired
(convolution -65,536 and -16,384 after optimization, in the range only as a hinge)."""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat

FWD = "jit(loss)/jvp(MlpModel)/blocks/mlp/Dense_0/dot_general"
REMAT = "jit(loss)/transpose(jvp(MlpModel))/checkpoint/rematted_computation/blocks/mlp/Dense_0/dot_general"
TPU = 'backend_config={"scoped_memory_configs":[]}'
LAYOUT = "{(f32[4,16]{1,0:T(8,128)})->f32[4,128]{1,0:T(8,128)}}"
DIMS = "lhs_contracting_dims={1}, rhs_contracting_dims={0}"


def _trips(n: int) -> str:
    return 'backend_config={"known_trip_count":{"n":"%d"}}' % n


def _module(loop_name: str = FWD, trips: int = 2, recompute_rows: int = 4) -> hloparse.Module:
    return hloparse.parse(f"""HloModule m, is_scheduled=true, num_partitions=2, entry_computation_layout={LAYOUT}

window {{
  wp = (s32[], f32[4,16], f32[16,128], f32[4,128]) parameter(0)
  i = s32[] get-tuple-element(wp), index=0
  x = f32[4,16] get-tuple-element(wp), index=1
  w = f32[16,128] get-tuple-element(wp), index=2
  acc = f32[4,128] get-tuple-element(wp), index=3
  d = f32[4,128] dot(x, w), {DIMS}, metadata={{op_name="{FWD}"}}
  s = f32[4,128] add(acc, d), metadata={{op_name="{FWD}"}}
  xn = f32[4,16] collective-permute(x), source_target_pairs={{{{0,1}},{{1,0}}}}, metadata={{op_name="{FWD}"}}
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[], f32[4,16], f32[16,128], f32[4,128]) tuple(j, xn, w, s)
}}

window_cond {{
  cp = (s32[], f32[4,16], f32[16,128], f32[4,128]) parameter(0)
  ci = s32[] get-tuple-element(cp), index=0
  n = s32[] constant({trips})
  ROOT lt = pred[] compare(ci, n), direction=LT
}}

ENTRY main {{
  p0 = f32[4,16] parameter(0), {TPU}
  p1 = f32[16,128] parameter(1)
  p2 = f32[{recompute_rows},32] parameter(2)
  p3 = f32[32,128] parameter(3)
  z = s32[] constant(0)
  zf = f32[] constant(0)
  a0 = f32[4,128] broadcast(zf), dimensions={{}}
  init = (s32[], f32[4,16], f32[16,128], f32[4,128]) tuple(z, p0, p1, a0)
  loop = (s32[], f32[4,16], f32[16,128], f32[4,128]) while(init), condition=window_cond, body=window,
    metadata={{op_name="{loop_name}"}}, {_trips(trips)}
  h = f32[4,128] get-tuple-element(loop), index=3
  r = f32[{recompute_rows},128] dot(p2, p3), {DIMS}, metadata={{op_name="{REMAT}"}}
  ROOT out = (f32[4,128], f32[{recompute_rows},128]) tuple(h, r)
}}
""")


def test_a_recompute_whose_forward_runs_in_a_window_loop_pairs_by_its_whole_flops():
    assert ("main", "r") in find_remat(_module()).remat


def test_only_a_loop_named_by_its_matmul_and_only_equal_whole_flops():
    # A loop jax wrote (named by the scan, not by the einsum) is no window loop: the forward's
    # matmul is one per trip, another matmul than the recompute's.
    assert ("main", "r") not in find_remat(_module(loop_name="jit(loss)/jvp(MlpModel)/while")).remat
    # Three windows of 16,384 FLOPs are not one 32,768-FLOP matmul.
    assert ("main", "r") not in find_remat(_module(trips=3)).remat
    # Nor is a recompute of other rows.
    assert ("main", "r") not in find_remat(_module(recompute_rows=8)).remat


def _unrolled(weight_b: str = "w", permuted: str = FWD) -> hloparse.Module:
    """TPU draw 113 (nnx_scan, FSDP): the forward's windows unrolled in one frame, `[2,16] x [16,32]`
    twice, the second window collective-permuted in; the recompute `[4,16] x [16,32]` whole in the
    backward loop's body."""
    return hloparse.parse(f"""HloModule m, is_scheduled=true, num_partitions=2, entry_computation_layout={LAYOUT}

back {{
  bp = (s32[], f32[4,16], f32[16,32]) parameter(0)
  i = s32[] get-tuple-element(bp), index=0
  x = f32[4,16] get-tuple-element(bp), index=1
  w = f32[16,32] get-tuple-element(bp), index=2
  r = f32[4,32] dot(x, w), {DIMS}, metadata={{op_name="{REMAT}"}}
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[], f32[4,16], f32[16,32]) tuple(j, x, w)
}}

back_cond {{
  cp = (s32[], f32[4,16], f32[16,32]) parameter(0)
  ci = s32[] get-tuple-element(cp), index=0
  n = s32[] constant(2)
  ROOT lt = pred[] compare(ci, n), direction=LT
}}

ENTRY main {{
  xa = f32[2,16] parameter(0), {TPU}
  xb = f32[2,16] parameter(1)
  w = f32[16,32] parameter(2)
  v = f32[16,32] parameter(3)
  x = f32[4,16] parameter(4)
  xn = f32[2,16] collective-permute(xb), source_target_pairs={{{{0,1}},{{1,0}}}}, metadata={{op_name="{permuted}"}}
  da = f32[2,32] dot(xa, w), {DIMS}, metadata={{op_name="{FWD}"}}
  db = f32[2,32] dot(xn, {weight_b}), {DIMS}, metadata={{op_name="{FWD}"}}
  z = s32[] constant(0)
  init = (s32[], f32[4,16], f32[16,32]) tuple(z, x, w)
  loop = (s32[], f32[4,16], f32[16,32]) while(init), condition=back_cond, body=back,
    metadata={{op_name="jit(loss)/transpose(jvp(MlpModel))/while"}}, {_trips(2)}
  ROOT out = (f32[2,32], f32[2,32], (s32[], f32[4,16], f32[16,32])) tuple(da, db, loop)
}}
""")


def test_a_recompute_whose_forward_windows_are_unrolled_pairs_with_them_together():
    assert ("back", "r") in find_remat(_unrolled()).remat


def test_unrolled_windows_share_their_weight_and_pass_a_window_on_under_their_name():
    assert ("back", "r") not in find_remat(_unrolled(weight_b="v")).remat  # two matmuls of other weights
    assert ("back", "r") not in find_remat(_unrolled(permuted="jit(loss)/jvp(MlpModel)/other")).remat
