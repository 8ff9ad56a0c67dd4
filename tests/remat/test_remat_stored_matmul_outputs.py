"""A layer's `h = x @ w + b` the recompute stores narrowed while the forward fuses it on unstored
(analysis/hloflops/remat/stored_matmul_outputs.py). TPU computes the bias add in f32 inside the
matmul's fusion: `dw` widens the matmul's output, `bw` the bias, and the recompute's fusion narrows
`h` where it leaves (`n.r`), read by the backward's fusion that widens it again (`gw`). The forward's
`h` has the next matmul's activation as its one reader: XLA nests matmul, add and activation in that
matmul's fusion, no narrow of `h`. The program without remat stores `h` as the recompute does and
its forward reader widens it: of the converts, only one widen runs because of remat (TPU draws 29,
104, 186, 199, 217: convert +5 copies of `h`'s size per layer before). The others are model FLOPs,
unsure (the range's high end keeps them)."""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat

HLO = """HloModule stored_matmul_output, is_scheduled=true, entry_computation_layout=@L

inner {
  i0 = bf16[8,16] parameter(0)
  i1 = bf16[16,32] parameter(1)
  i2 = bf16[32] parameter(2)
  d = bf16[8,32] dot(i0, i1), @D, metadata={op_name="@F/Dense_0/dot_general"}
  dw = f32[8,32] convert(d)
  b = bf16[8,32] broadcast(i2), dimensions={1}
  bw = f32[8,32] convert(b)
  a = f32[8,32] add(dw, bw), metadata={op_name="@F/Dense_0/add"}
  t = f32[8,32] tanh(a), metadata={op_name="@F/tanh"}
  ROOT c = bf16[8,32] convert(t)
}

outer {
  o0 = bf16[8,16] parameter(0)
  o1 = bf16[16,32] parameter(1)
  o2 = bf16[32,4] parameter(2)
  o3 = bf16[32] parameter(3)
  h = bf16[8,32] fusion(o0, o1, o3), kind=kOutput, calls=inner
  ROOT y = f32[8,4] dot(h, o2), @D, metadata={op_name="@F/Dense_1/dot_general"}
}

recompute {
  r0 = bf16[8,16] parameter(0)
  r1 = bf16[16,32] parameter(1)
  r2 = bf16[32] parameter(2)
  d.r = bf16[8,32] dot(r0, r1), @D, metadata={op_name="@R/Dense_0/dot_general"}
  dw.r = f32[8,32] convert(d.r)
  b.r = bf16[8,32] broadcast(r2), dimensions={1}
  bw.r = f32[8,32] convert(b.r)
  a.r = f32[8,32] add(dw.r, bw.r), metadata={op_name="@R/Dense_0/add"}
  ROOT n.r = bf16[8,32] convert(a.r)
}

gradient {
  g0 = bf16[8,32] parameter(0)
  g1 = f32[8,32] parameter(1)
  gw = f32[8,32] convert(g0)
  t.g = f32[8,32] tanh(gw), metadata={op_name="@R/tanh"}
  ROOT g = f32[8,32] multiply(t.g, g1), metadata={op_name="@B/mul"}
}

ENTRY main {
  x = bf16[8,16] parameter(0)
  w = bf16[16,32] parameter(1)
  v = bf16[32,4] parameter(2)
  bias = bf16[32] parameter(3)
  ct = f32[8,32] parameter(4)
  y = f32[8,4] fusion(x, w, v, bias), kind=kOutput, calls=outer, @T
  hr = bf16[8,32] fusion(x, w, bias), kind=kOutput, calls=recompute
  g = f32[8,32] fusion(hr, ct), kind=kLoop, calls=gradient
  ROOT out = (f32[8,4], f32[8,32]) tuple(y, g)
}
"""


def _parsed(text: str):
    """@F the forward, @R the checkpoint's recompute, @B its backward; @D a matmul's dimensions;
    @L the entry's layout and @T TPU's backend config (what makes it a TPU module)."""
    for short, long in (("@D", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
                        ("@R", "jit(loss)/transpose(jvp())/checkpoint/rematted_computation"),
                        ("@B", "jit(loss)/transpose(jvp())/checkpoint"), ("@F", "jit(loss)/jvp()"),
                        ("@L", "{(bf16[8,16]{1,0:T(8,128)})->f32[8,4]{1,0:T(8,128)}}"),
                        ("@T", 'backend_config={"scoped_memory_configs":[]}')):
        text = text.replace(short, long)
    return hloparse.parse(text)


def test_the_converts_around_a_stored_matmul_output_but_one_widen_are_the_program_without_remats():
    index = find_remat(_parsed(HLO))
    assert ("recompute", "d.r") in index and ("recompute", "a.r") in index
    assert ("recompute", "dw.r") in index  # the one widen remat adds
    assert ("recompute", "bw.r") not in index
    for key in (("recompute", "n.r"), ("gradient", "gw")):
        assert key not in index, key
        assert key in index.unsure, key  # the range's high end keeps them


def test_a_forward_that_stores_its_matmul_output_too_is_left_alone():
    # The forward's fusion hands out `h` narrowed as the recompute's does: no sign that the
    # program without remat fused otherwise; the pairing's answer stands.
    text = HLO.replace("""  t = f32[8,32] tanh(a), metadata={op_name="@F/tanh"}
  ROOT c = bf16[8,32] convert(t)""", """  ROOT c = bf16[8,32] convert(a)""")
    before = find_remat(_parsed(text))
    assert ("recompute", "n.r") not in before.unsure
