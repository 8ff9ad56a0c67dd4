"""A recompute's matmul run whole in the frame where the partitioner windowed its forward
(hloflops.remat.windowed_forward_recomputes).

Hand-written after utpu draws 196 (scan_unrolled, mlp, FSDP) and 209 (eqx_list, FSDP): every layer
unrolled into ENTRY, the forward's first matmul as two windows `[2,16] x [16,32]` (the second
window's rows collective-permuted in), the recompute `[4,16] x [16,32]` whole in the same frame,
each reading the same layer's slice of the stacked weights. Neither value nor signature meet and
hloflops.remat.windowed_matmuls pairs windows across frames only: the three recomputes were left
a hinge (convolution -98,304 on both draws)."""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat

FWD = "jit(loss)/jvp()/closed_call/dot_general"
REMAT = "jit(loss)/transpose(jvp())/closed_call/checkpoint/rematted_computation/dot_general"
TPU = 'backend_config={"scoped_memory_configs":[]}'
LAYOUT = "{(f32[2,16]{1,0:T(8,128)})->f32[2,32]{1,0:T(8,128)}}"
DIMS = "lhs_contracting_dims={1}, rhs_contracting_dims={0}"


def _module(recompute_weight: str = "w0", permuted: str = FWD, rows: int = 4) -> hloparse.Module:
    return hloparse.parse(f"""HloModule m, is_scheduled=true, num_partitions=4, entry_computation_layout={LAYOUT}

ENTRY main {{
  xa = f32[2,16] parameter(0), {TPU}
  xb = f32[2,16] parameter(1)
  ws = f32[2,16,32] parameter(2)
  x = f32[{rows},16] parameter(3)
  s0 = f32[1,16,32] slice(ws), slice={{[0:1], [0:16], [0:32]}}
  w0 = f32[16,32] bitcast(s0)
  s1 = f32[1,16,32] slice(ws), slice={{[1:2], [0:16], [0:32]}}
  w1 = f32[16,32] bitcast(s1)
  xn = f32[2,16] collective-permute(xb), source_target_pairs={{{{0,1}},{{1,0}}}}, metadata={{op_name="{permuted}"}}
  da = f32[2,32] dot(xa, w0), {DIMS}, metadata={{op_name="{FWD}"}}
  db = f32[2,32] dot(xn, w0), {DIMS}, metadata={{op_name="{FWD}"}}
  r = f32[{rows},32] dot(x, {recompute_weight}), {DIMS}, metadata={{op_name="{REMAT}"}}
  ROOT out = (f32[2,32], f32[2,32], f32[{rows},32]) tuple(da, db, r)
}}
""")


def test_a_recompute_whose_forward_windows_share_its_frame_pairs_with_them():
    assert ("main", "r") in find_remat(_module()).remat


def test_only_windows_of_the_recompute_s_own_weight_and_whole_flops():
    # Another layer's slice of the stacked weights: those windows are another einsum's.
    assert ("main", "r") not in find_remat(_module(recompute_weight="w1")).remat
    # Two windows of 2 rows are not one matmul of 8.
    assert ("main", "r") not in find_remat(_module(rows=8)).remat


def test_windows_are_told_by_a_permute_under_their_name():
    # A frame that passes nothing around under the matmul's name holds no windows of it.
    assert ("main", "r") not in find_remat(_module(permuted="jit(loss)/jvp()/closed_call/other")).remat
