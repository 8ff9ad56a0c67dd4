"""A weight shard narrowed again for the recompute's gather (analysis/hloflops/remat/
regathered_narrows.py). Under FSDP, TPU narrows a bf16 matmul's weight shard before gathering it.
jax's checkpoint reads its weights through the barrier on the recompute's inputs, so the recompute
gathers its own copy of the weight, narrowed again (`n.r`); the program without remat narrows each
shard once (TPU draws 52 and 55: convert -1,024 and -16,384 after optimization). Unsure: how XLA
shares one narrow between gathers rests on scheduling. The forward's narrow `n`, a jax cast of the
shard (named `n.c`), and a narrow no gather reads are left alone."""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat

HLO = """HloModule regathered, is_scheduled=true, entry_computation_layout=@L

ENTRY main {
  x = f32[8,64] parameter(0)
  w = f32[16,8] parameter(1)
  g = f32[8,8] parameter(2)
  n = bf16[16,8] convert(w)
  a = bf16[64,8] all-gather(n), dimensions={0}, replica_groups={{0,1,2,3}}, @T
  xb = bf16[8,64] convert(x)
  h = f32[8,8] dot(xb, a), @D, metadata={op_name="@F/Dense_0/dot_general"}
  t = f32[8,8] tanh(h), metadata={op_name="@F/tanh"}
  c = f32[16,8] copy(w)
  n.r = bf16[16,8] convert(c)
  a.r = bf16[64,8] all-gather(n.r), dimensions={0}, replica_groups={{0,1,2,3}}
  h.r = f32[8,8] dot(xb, a.r), @D, metadata={op_name="@R/Dense_0/dot_general"}
  t.r = f32[8,8] tanh(h.r), metadata={op_name="@R/tanh"}
  m = f32[8,8] multiply(t.r, g), metadata={op_name="@B/mul"}
  n.c = bf16[16,8] convert(w), metadata={op_name="@B/convert_element_type"}
  a.c = bf16[64,8] all-gather(n.c), dimensions={0}, replica_groups={{0,1,2,3}}
  ROOT out = (f32[8,8], f32[8,8], bf16[64,8]) tuple(t, m, a.c)
}
"""


def _parsed(text: str):
    """@F the forward, @R the checkpoint's recompute, @B its backward; @D a matmul's dimensions;
    @L the entry's layout and @T TPU's backend config (what makes it a TPU module)."""
    for short, long in (("@D", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
                        ("@R", "jit(loss)/transpose(jvp())/checkpoint/rematted_computation"),
                        ("@B", "jit(loss)/transpose(jvp())/checkpoint"), ("@F", "jit(loss)/jvp()"),
                        ("@L", "{(f32[8,64]{1,0:T(8,128)})->f32[8,8]{1,0:T(8,128)}}"),
                        ("@T", 'backend_config={"scoped_memory_configs":[]}')):
        text = text.replace(short, long)
    return hloparse.parse(text)


def test_a_shard_narrowed_again_for_a_gather_is_remat_unsure():
    index = find_remat(_parsed(HLO))
    assert ("main", "h.r") in index
    assert ("main", "n.r") in index and ("main", "n.r") in index.weak
    assert ("main", "n") not in index


def test_a_named_cast_of_the_shard_is_left_to_the_pairing():
    index = find_remat(_parsed(HLO))
    assert ("main", "n.c") not in index


def test_a_narrow_read_by_no_gather_is_left_alone():
    text = HLO.replace("a.r = bf16[64,8] all-gather(n.r), dimensions={0}, replica_groups={{0,1,2,3}}",
                       "a.r = bf16[64,8] concatenate(n.r, n.r, n.r, n.r), dimensions={0}")
    assert ("main", "n.r") not in find_remat(_parsed(text))


# TPU fused the narrow alone: each `bitcast_convert_fusion` converts the checkpoint's input `x`
# for a gather. The recompute's input is another value behind jax's barrier, so the partitioner
# narrows and gathers it again (`nf.r`); the program without remat gathers `x` once (held-out TPU
# draw 94, an FSDP fori_loop MLP: convert -128 before).
FUSED = """HloModule regathered_fused, is_scheduled=true, entry_computation_layout=@L

narrow.1 {
  p.1 = f32[2,64] parameter(0)
  b.1 = f32[1,2,64] bitcast(p.1)
  ROOT n.1 = bf16[1,2,64] convert(b.1)
}

narrow.2 {
  p.2 = f32[2,64] parameter(0)
  b.2 = f32[1,2,64] bitcast(p.2)
  ROOT n.2 = bf16[1,2,64] convert(b.2)
}

ENTRY main {
  x = f32[2,64] parameter(0)
  w = bf16[64,8] parameter(1)
  g = f32[8,8] parameter(2)
  nf = bf16[1,2,64] fusion(x), kind=kLoop, calls=narrow.1
  a = bf16[4,2,64] all-gather(nf), dimensions={0}, replica_groups={{0,1,2,3}}, @T
  ab = bf16[8,64] bitcast(a)
  h = f32[8,8] dot(ab, w), @D, metadata={op_name="@F/Dense_0/dot_general"}
  t = f32[8,8] tanh(h), metadata={op_name="@F/tanh"}
  c = f32[2,64] copy(x)
  nf.r = bf16[1,2,64] fusion(c), kind=kLoop, calls=narrow.2
  a.r = bf16[4,2,64] all-gather(nf.r), dimensions={0}, replica_groups={{0,1,2,3}}
  ab.r = bf16[8,64] bitcast(a.r)
  h.r = f32[8,8] dot(ab.r, w), @D, metadata={op_name="@R/Dense_0/dot_general"}
  t.r = f32[8,8] tanh(h.r), metadata={op_name="@R/tanh"}
  m = f32[8,8] multiply(t.r, g), metadata={op_name="@B/mul"}
  ROOT out = (f32[8,8], f32[8,8]) tuple(t, m)
}
"""


def test_a_fused_narrow_of_the_input_again_for_a_gather_is_remat_unsure():
    index = find_remat(_parsed(FUSED))
    assert ("narrow.2", "n.2") in index and ("narrow.2", "n.2") in index.weak
    assert ("narrow.1", "n.1") not in index


def test_a_fused_narrow_read_by_no_gather_is_left_alone():
    text = FUSED.replace("a.r = bf16[4,2,64] all-gather(nf.r), dimensions={0}, replica_groups={{0,1,2,3}}",
                         "a.r = bf16[4,2,64] concatenate(nf.r, nf.r, nf.r, nf.r), dimensions={0}")
    assert ("narrow.2", "n.2") not in find_remat(_parsed(text))
