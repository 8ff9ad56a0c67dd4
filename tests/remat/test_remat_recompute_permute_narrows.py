"""A value narrowed only for a recompute's windowed-einsum permutes (analysis/hloflops/remat/
recompute_permute_narrows.py). Under tensor parallelism the partitioner may unroll a windowed einsum
into its caller: each step passes a bf16 window on with a collective-permute named for the matmul it
serves. The recompute's einsum, behind jax's barrier, narrows and passes its own windows under its
remat name (`n.r`), though CSE merged the value itself with the forward's (`t`, as in TPU 325's
partial sums); the program without remat runs no recompute and no such permute (TPU draw 325:
convert -1,536 out of range before). Unsure: in the range. The forward's narrow (`n`) and the
backward's own einsum's (`n.b`) stay the model's, as does a narrow read by anything but permutes."""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat

HLO = """HloModule recompute_permutes, is_scheduled=true, entry_computation_layout=@L

ENTRY main {
  x = f32[8,64] parameter(0)
  w = bf16[64,8] parameter(1)
  g = f32[8,8] parameter(2)
  xb = bf16[8,64] convert(x)
  h = f32[8,8] dot(xb, w), @D, metadata={op_name="@F/Dense_0/dot_general"}
  t = f32[8,8] tanh(h), metadata={op_name="@F/tanh"}
  n = bf16[8,8] convert(t)
  p = bf16[8,8] collective-permute(n), source_target_pairs=@P, @T, metadata={op_name="@F/Dense_1/dot_general"}
  n.r = bf16[8,8] convert(t)
  p.r = bf16[8,8] collective-permute(n.r), source_target_pairs=@P, metadata={op_name="@R/Dense_1/dot_general"}
  n.b = bf16[8,8] convert(t)
  p.b = bf16[8,8] collective-permute(n.b), source_target_pairs=@P, metadata={op_name="@B/Dense_1/dot_general"}
  m = f32[8,8] multiply(t, g), metadata={op_name="@B/mul"}
  ROOT out = (bf16[8,8], bf16[8,8], bf16[8,8], f32[8,8]) tuple(p, p.r, p.b, m)
}
"""


def _parsed(text: str):
    """@F the forward, @R the checkpoint's recompute, @B its backward; @D a matmul's dimensions;
    @P a permute's pairs;
    @L the entry's layout and @T TPU's backend config (what makes it a TPU module)."""
    for short, long in (("@D", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
                        ("@R", "jit(loss)/transpose(jvp())/checkpoint/rematted_computation"),
                        ("@B", "jit(loss)/transpose(jvp())/checkpoint"), ("@F", "jit(loss)/jvp()"),
                        ("@P", "{{0,1},{1,0}}"),
                        ("@L", "{(f32[8,64]{1,0:T(8,128)})->f32[8,8]{1,0:T(8,128)}}"),
                        ("@T", 'backend_config={"scoped_memory_configs":[]}')):
        text = text.replace(short, long)
    return hloparse.parse(text)


def test_a_narrow_only_the_recomputes_permutes_read_is_remat_unsure():
    index = find_remat(_parsed(HLO))
    assert ("main", "n.r") in index and ("main", "n.r") in index.weak


def test_the_forwards_and_the_backwards_own_permute_narrows_stay_the_models():
    index = find_remat(_parsed(HLO))
    assert ("main", "n") not in index
    assert ("main", "n.b") not in index


def test_a_narrow_read_by_more_than_permutes_is_left_alone():
    narrow = "  n.b = bf16[8,8] convert(t)\n"
    text = HLO.replace(narrow, narrow + "  q = bf16[8,8] negate(n.r)\n")
    outputs = "(bf16[8,8], bf16[8,8], bf16[8,8], f32[8,8]"
    text = text.replace("tuple(p, p.r, p.b, m)", "tuple(p, p.r, p.b, m, q)").replace(
        outputs + ") tuple", outputs + ", bf16[8,8]) tuple")
    assert "negate(n.r)" in text
    assert ("main", "n.r") not in find_remat(_parsed(text))
