"""A weight shard narrowed again for the backward's windowed einsum (analysis/hloflops/remat/
regathered_narrows.py). Under tensor parallelism the partitioner computes a matmul in a loop
passing the weight shard on with collective-permutes, the narrowed shard one element of the loop's
state. jax's checkpoint hands its backward the weight through the barrier, so the backward's loop
reads a narrow of its own (`n.b`) where the program without remat narrows the shard once for both
loops (held-out TPU draw 123, an offloaded nnx MLP: convert -10,048 out of range). Unsure, as a
narrow regathered by an all-gather; a narrow read by a loop that moves nothing between devices is
left alone."""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat

HLO = """HloModule windowed, is_scheduled=true, entry_computation_layout=@L

body.f {
  s.f = (bf16[16,8], f32[8,8], s32[]) parameter(0)
  w.f = bf16[16,8] get-tuple-element(s.f), index=0
  a.f = f32[8,8] get-tuple-element(s.f), index=1
  i.f = s32[] get-tuple-element(s.f), index=2
  p.f = bf16[16,8] collective-permute(w.f), source_target_pairs={{0,1},{1,0}}
  ROOT r.f = (bf16[16,8], f32[8,8], s32[]) tuple(p.f, a.f, i.f)
}

cond.f {
  c.f = (bf16[16,8], f32[8,8], s32[]) parameter(0)
  ROOT k.f = pred[] constant(false)
}

body.b {
  s.b = (bf16[16,8], f32[8,8], s32[]) parameter(0)
  w.b = bf16[16,8] get-tuple-element(s.b), index=0
  a.b = f32[8,8] get-tuple-element(s.b), index=1
  i.b = s32[] get-tuple-element(s.b), index=2
  p.b = bf16[16,8] collective-permute(w.b), source_target_pairs={{0,1},{1,0}}
  ROOT r.b = (bf16[16,8], f32[8,8], s32[]) tuple(p.b, a.b, i.b)
}

cond.b {
  c.b = (bf16[16,8], f32[8,8], s32[]) parameter(0)
  ROOT k.b = pred[] constant(false)
}

ENTRY main {
  x = f32[8,64] parameter(0)
  w = f32[16,8] parameter(1)
  g = f32[8,8] parameter(2)
  z = f32[8,8] constant({...})
  zero = s32[] constant(0)
  n = bf16[16,8] convert(w)
  st.f = (bf16[16,8], f32[8,8], s32[]) tuple(n, z, zero)
  l.f = (bf16[16,8], f32[8,8], s32[]) while(st.f), condition=cond.f, body=body.f, @T
  xb = bf16[8,64] convert(x)
  h.r = f32[8,8] dot(xb, xb), @D, metadata={op_name="@R/Dense_0/dot_general"}
  t.r = f32[8,8] tanh(h.r), metadata={op_name="@R/tanh"}
  h = f32[8,8] dot(xb, xb), @D, metadata={op_name="@F/Dense_0/dot_general"}
  m = f32[8,8] multiply(t.r, g), metadata={op_name="@B/mul"}
  n.b = bf16[16,8] convert(w)
  st.b = (bf16[16,8], f32[8,8], s32[]) tuple(n.b, m, zero)
  l.b = (bf16[16,8], f32[8,8], s32[]) while(st.b), condition=cond.b, body=body.b
  ROOT out = ((bf16[16,8], f32[8,8], s32[]), (bf16[16,8], f32[8,8], s32[]), f32[8,8]) tuple(l.f, l.b, h)
}
"""


def _parsed(text: str):
    """@F the forward, @R the checkpoint's recompute, @B its backward; @D a matmul's dimensions;
    @L the entry's layout and @T TPU's backend config (what makes it a TPU module)."""
    for short, long in (("@D", "lhs_contracting_dims={1}, rhs_contracting_dims={1}"),
                        ("@R", "jit(loss)/transpose(jvp())/checkpoint/rematted_computation"),
                        ("@B", "jit(loss)/transpose(jvp())/checkpoint"), ("@F", "jit(loss)/jvp()"),
                        ("@L", "{(f32[8,64]{1,0:T(8,128)})->f32[8,8]{1,0:T(8,128)}}"),
                        ("@T", 'backend_config={"scoped_memory_configs":[]}')):
        text = text.replace(short, long)
    return hloparse.parse(text)


def test_a_shard_narrowed_again_for_a_windowed_loop_is_remat_unsure():
    index = find_remat(_parsed(HLO))
    assert ("main", "n.b") in index and ("main", "n.b") in index.weak
    assert ("main", "n") not in index


def test_a_narrow_read_by_a_loop_moving_nothing_between_devices_is_left_alone():
    text = HLO.replace("p.b = bf16[16,8] collective-permute(w.b), source_target_pairs={{0,1},{1,0}}",
                       "p.b = bf16[16,8] copy(w.b)")
    assert ("main", "n.b") not in find_remat(_parsed(text))
