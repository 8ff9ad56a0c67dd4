"""A recompute's cheap copy in TPU's async collective fusion (analysis/hloflops/remat/fusion_copies.py).
TPU fuses a collective with unrelated elementwise work so that the two overlap: an fsdp weight's
all-gather for a recompute's matmul beside a gradient fusion's ops (gelu's chain, copied from the
recompute into the fusion computing the activation's gradient). The gather is the recompute's, but
it says nothing of the copies computed beside it: whether they run because of remat is the
gradient's fusion's answer, as for the same chain in a fusion without a collective (TPU draw 147,
grad_accumulation fsdp: one microbatch's gelu chain sat beside a recompute's gather and was counted
sure, the other's beside a gradient's gather and was a hinge; multiply +114,688, add +65,536)."""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat

# `xr` is the recompute's input (read back: another op than the forward's `x`), so the recompute's
# copies of `x * x` are a class of their own, counted against the forward's two copies by name.
GATHER_BESIDE_A_GRADIENT_COPY = """HloModule gather_beside_gradient_copy, is_scheduled=true

forward.1 {
  a0 = f32[8,16] parameter(0)
  as = f32[8,16] multiply(a0, a0), metadata={op_name="@F/integer_pow"}
  ROOT am = f32[8,16] add(as, a0), metadata={op_name="@F/add"}
}

forward.2 {
  b0 = f32[8,16] parameter(0)
  bs = f32[8,16] multiply(b0, b0), metadata={op_name="@F/integer_pow"}
  ROOT bm = f32[8,16] subtract(bs, b0), metadata={op_name="@F/sub"}
}

recomputed {
  r0 = f32[8,16] parameter(0)
  rs = f32[8,16] multiply(r0, r0), metadata={op_name="@R/integer_pow"}
  ROOT ra = f32[8,16] add(rs, r0), metadata={op_name="@R/add"}
}

gathered_gradient {
  w0 = bf16[16,8] parameter(0)
  g0 = f32[8,16] parameter(1)
  d0 = f32[8,16] parameter(2)
  ag = bf16[64,8] all-gather(w0), dimensions={0}, replica_groups={{0,1,2,3}}, metadata={op_name="@R/dot_general"}
  cs = f32[8,16] multiply(g0, g0), metadata={op_name="@R/integer_pow"}
  cm = f32[8,16] multiply(d0, cs), metadata={op_name="@B/mul"}
  ROOT t = (bf16[64,8], f32[8,16]) tuple(ag, cm)
}

ENTRY main {
  x = f32[8,16] parameter(0)
  w = bf16[16,8] parameter(1)
  dy = f32[8,16] parameter(2)
  fa = bf16[64,8] all-gather(w), dimensions={0}, replica_groups={{0,1,2,3}}, metadata={op_name="@F/dot_general"}
  y1 = f32[8,16] fusion(x), kind=kLoop, calls=forward.1
  y2 = f32[8,16] fusion(x), kind=kLoop, calls=forward.2
  xr = f32[8,16] negate(x), metadata={op_name="@R/neg"}
  r = f32[8,16] fusion(xr), kind=kLoop, calls=recomputed
  gg = (bf16[64,8], f32[8,16]) fusion(w, xr, dy), kind=kLoop, calls=gathered_gradient
  ROOT out = (bf16[64,8], f32[8,16], f32[8,16], f32[8,16], (bf16[64,8], f32[8,16])) tuple(fa, y1, y2, r, gg)
}
"""


def _parsed(text: str):
    """The module, its op_name prefixes written out: @F the forward, @R the checkpoint's
    recompute, @B its backward."""
    for short, long in (("@R", "jit(loss)/transpose(jvp())/checkpoint/rematted_computation/mlp"),
                        ("@B", "jit(loss)/transpose(jvp())/checkpoint/mlp"), ("@F", "jit(loss)/jvp()/mlp")):
        text = text.replace(short, long)
    return hloparse.parse(text)


def test_a_gradient_copy_beside_a_recomputes_gather_is_no_sure_recompute():
    index = find_remat(_parsed(GATHER_BESIDE_A_GRADIENT_COPY))
    assert ("recomputed", "rs") in index.remat  # the recompute's own copy
    # the copy in the gradient's fusion is the twin's too, however the gather beside it is counted
    assert ("gathered_gradient", "cs") not in index.remat or ("gathered_gradient", "cs") in index.weak
