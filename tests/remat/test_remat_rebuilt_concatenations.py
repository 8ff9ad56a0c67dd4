"""Concatenations the recompute builds again (analysis/hloflops/remat/rebuilt_concatenations.py).

TPU builds a concatenation from `-inf` pads combined by `maximum` (FLOPs) or in place by
dynamic-update-slices (none). An LSTM's gate kernel is concatenated in the forward and again, from
the same weights narrowed for it, in the recompute of each backward step; the program without
remat's backward reads the forward's, which XLA may then build in place (TPU draw 53: maximum
-786,432 and convert -1,572,864 after optimization, out of the range). The forward's
concatenation and the narrows only the recompute reads are unsure: in the range, not counted."""

from __future__ import annotations

import hloparse
from hloflops.accounting import account
from hloflops.remat import find_remat

MODULE = """HloModule rebuilt_concatenation, is_scheduled=true, entry_computation_layout=@L

concat_fwd {
  a = f32[4,4] parameter(0)
  b = f32[4,4] parameter(1)
  inf = f32[] constant(-inf)
  pa = bf16[4,8] pad(a, inf), padding=0_0x0_4
  wa = f32[4,8] convert(pa)
  pb = bf16[4,8] pad(b, inf), padding=0_0x4_0
  wb = f32[4,8] convert(pb)
  m = f32[4,8] maximum(wa, wb), metadata={op_name="@F/concatenate"}
  ROOT n = bf16[4,8] convert(m)
}

matmul_fwd {
  x = bf16[2,4] parameter(0)
  k = bf16[4,8] parameter(1)
  ROOT d = f32[2,8] dot(x, k), @D, metadata={op_name="@F/dot_general"}, @T
}

concat_rec {
  ra = bf16[4,4] parameter(0)
  rb = bf16[4,4] parameter(1)
  rinf = f32[] constant(-inf)
  rpa = bf16[4,8] pad(ra, rinf), padding=0_0x0_4
  rwa = f32[4,8] convert(rpa)
  rpb = bf16[4,8] pad(rb, rinf), padding=0_0x4_0
  rwb = f32[4,8] convert(rpb)
  rm = f32[4,8] maximum(rwa, rwb), metadata={op_name="@R/concatenate"}
  ROOT rn = bf16[4,8] convert(rm)
}

matmul_rec {
  rx = bf16[2,4] parameter(0)
  rk = bf16[4,8] parameter(1)
  ROOT rd = f32[2,8] dot(rx, rk), @D, metadata={op_name="@R/dot_general"}
}

ENTRY main {
  w0 = f32[4,4] parameter(0)
  w1 = f32[4,4] parameter(1)
  x0 = bf16[2,4] parameter(2)
  kf = bf16[4,8] fusion(w0, w1), kind=kLoop, calls=concat_fwd
  y = f32[2,8] fusion(x0, kf), kind=kOutput, calls=matmul_fwd
  n0 = bf16[4,4] convert(w0)
  n1 = bf16[4,4] convert(w1)
  kr = bf16[4,8] fusion(n0, n1), kind=kLoop, calls=concat_rec
  yr = f32[2,8] fusion(x0, kr), kind=kOutput, calls=matmul_rec
  ROOT out = (f32[2,8], f32[2,8]) tuple(y, yr)
}
"""


def _parsed(text: str):
    """@F the forward's op_name prefix, @R the recompute's; @D the matmul's dimension numbers, @L
    the entry's layout, @T TPU's backend config (what makes it a TPU module)."""
    for short, long in (("@R", "jit(loss)/transpose(jvp())/checkpoint/rematted_computation/lstm"),
                        ("@F", "jit(loss)/jvp()/lstm"),
                        ("@D", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
                        ("@L", "{(f32[4,4]{1,0:T(8,128)})->f32[2,8]{1,0:T(8,128)}}"),
                        ("@T", 'backend_config={"scoped_memory_configs":[]}')):
        text = text.replace(short, long)
    return hloparse.parse(text)


def test_the_forward_concatenation_the_recompute_rebuilds_is_unsure():
    index = find_remat(_parsed(MODULE))
    forward = {("concat_fwd", "m"), ("concat_fwd", "wa"), ("concat_fwd", "wb"), ("concat_fwd", "n")}
    narrows = {("main", "n0"), ("main", "n1")}
    assert forward | narrows <= index.unsure
    assert not (forward | narrows) & index.remat  # model FLOPs as reported; the range covers them
    low, high = account(_parsed(MODULE), xla={"flops": 0.0}).remat_flops_bounds
    assert high - low >= 32 * 4  # the forward's maximum and its three converts, 32 elements each


def test_a_concatenation_the_recompute_does_not_rebuild_stays_model_flops():
    alone = MODULE.replace("  ROOT rn = bf16[4,8] convert(rm)\n", "  ROOT rn = bf16[4,8] convert(rwa)\n")
    alone = alone.replace("  rm = f32[4,8] maximum(rwa, rwb), metadata={op_name=\"@R/concatenate\"}\n", "")
    index = find_remat(_parsed(alone))
    assert not {("concat_fwd", "m"), ("main", "n0")} & index.unsure
