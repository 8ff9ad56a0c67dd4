"""The converts TPU wraps around an expensive op it computes in f32 for a bf16 program
(analysis/hloflops/remat/type_corrections.py).

TPU writes a bf16 `tanh` as `convert(tanh(convert(x)))`, marking the tanh with the type it stood
for (`float_type_correction_info`). A recompute of tanh handed narrowed to a weight's gradient (TPU
draw 7, a Python loop under an offload policy: convert -1,536 after optimization) runs its widen and
its narrow because of remat as the tanh does; behind the offload policy's round trip the widen
reads a value no forward op reads, so no pairing found it (a float normalization widen, unsure)."""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat

_CORRECTED = 'backend_config={"float_type_correction_info":{"original_type":"BF16"}}'

WRAPPED = """HloModule wrapped_tanh, is_scheduled=true, entry_computation_layout=@L

matmul_fwd {
  u0 = bf16[8,4] parameter(0)
  u1 = bf16[4,16] parameter(1)
  ROOT ud = bf16[8,16] dot(u0, u1), @D, metadata={op_name="@F/dense_0/dot_general"}, @T
}

tanh_fwd {
  p0 = bf16[8,16] parameter(0)
  pw = f32[8,16] convert(p0)
  t = f32[8,16] tanh(pw), metadata={op_name="@F/tanh"}, @C
  ROOT pn = bf16[8,16] convert(t)
}

matmul_fwd_1 {
  q0 = bf16[8,16] parameter(0)
  q1 = bf16[16,8] parameter(1)
  f = bf16[8,16] fusion(q0), kind=kLoop, calls=tanh_fwd
  ROOT d = bf16[8,8] dot(f, q1), @D, metadata={op_name="@F/dense_1/dot_general"}
}

tanh_bwd {
  r0 = bf16[8,16] parameter(0)
  rw = f32[8,16] convert(r0)
  rt = f32[8,16] tanh(rw), metadata={op_name="@R/tanh"}, @C
  ROOT rn = bf16[8,16] convert(rt)
}

matmul_grad {
  s0 = bf16[8,16] parameter(0)
  s1 = bf16[8,8] parameter(1)
  g = bf16[8,16] fusion(s0), kind=kLoop, calls=tanh_bwd
  ROOT dw = bf16[16,8] dot(g, s1), @G, metadata={op_name="@B/dense_1/transpose"}
}

ENTRY main {
  x0 = bf16[8,4] parameter(0)
  w0 = bf16[4,16] parameter(1)
  w = bf16[16,8] parameter(2)
  dy = bf16[8,8] parameter(3)
  h = bf16[8,16] fusion(x0, w0), kind=kOutput, calls=matmul_fwd
  y = bf16[8,8] fusion(h, w), kind=kOutput, calls=matmul_fwd_1
  out = (bf16[8,16]{1,0:S(5)}, bf16[8,16]{1,0}, u32[]) copy-start(h)
  away = bf16[8,16]{1,0:S(5)} copy-done(out)
  back = (bf16[8,16]{1,0}, bf16[8,16]{1,0:S(5)}, u32[]) copy-start(away)
  x = bf16[8,16]{1,0} copy-done(back)
  dw = bf16[16,8] fusion(x, dy), kind=kOutput, calls=matmul_grad
  ROOT out2 = (bf16[8,8], bf16[16,8]) tuple(y, dw)
}
"""


def _parsed(text: str):
    """The module, its op_name prefixes written out: @F the forward, @R the checkpoint's
    recompute, @B its backward; @D a matmul's dimension numbers, @G a weight gradient's; @L the
    entry's layout, @T TPU's backend config (what makes it a TPU module), @C a type correction's."""
    for short, long in (("@R", "jit(loss)/transpose(jvp(jvp()))/checkpoint/rematted_computation"),
                        ("@B", "jit(loss)/transpose(jvp(jvp()))/checkpoint"), ("@F", "jit(loss)/jvp()"),
                        ("@D", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
                        ("@G", "lhs_contracting_dims={0}, rhs_contracting_dims={0}"),
                        ("@L", "{(bf16[8,4]{1,0:T(8,128)(2,1)})->bf16[8,8]{1,0:T(8,128)(2,1)}}"),
                        ("@T", 'backend_config={"scoped_memory_configs":[]}'), ("@C", _CORRECTED)):
        text = text.replace(short, long)
    return hloparse.parse(text)


def test_the_widen_and_narrow_around_a_recomputed_tanh_are_recompute():
    index = find_remat(_parsed(WRAPPED))
    assert ("tanh_bwd", "rt") in index.remat
    assert {("tanh_bwd", "rw"), ("tanh_bwd", "rn")} <= index.remat
    assert not {("tanh_fwd", "pw"), ("tanh_fwd", "pn")} & index.remat  # the forward's own


def test_a_tanh_read_wide_in_its_fusion_leaves_its_widen_to_the_pairing():
    # The gradient fusion reading the recomputed tanh wide (`1 - t`): the program without remat
    # widens its stored tanh there, one widen for one.
    wide = WRAPPED.replace("  ROOT rn = bf16[8,16] convert(rt)\n",
                           "  one = f32[] constant(1)\n  ones = f32[8,16] broadcast(one), dimensions={}\n"
                           "  rs = f32[8,16] subtract(ones, rt), metadata={op_name=\"@R/sub\"}\n"
                           "  ROOT rn = bf16[8,16] convert(rs)\n")
    index = find_remat(_parsed(wide))
    assert ("tanh_bwd", "rw") not in index.remat
