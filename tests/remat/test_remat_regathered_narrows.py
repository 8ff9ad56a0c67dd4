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
