"""A convolution input's `-inf` pad/maximum packing counts with the convolution reading it
(analysis/hloflops/remat/packed_conv_inputs.py). TPU concatenates shifted slices of an activation
for a 3x3 convolution's backward as pads of `-inf`, widened, combined by `maximum`, narrowed back.
Under a nested checkpoint the recompute packs the slices under its own name, for a backward
convolution that is model FLOPs; the program without remat packs the same operand for the same
convolution in its forward (TPU draw 16: convert +569,344 after optimization, the packings' converts
counted remat by their name). A packing no convolution reads is left to its name."""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat

HLO = """HloModule packed, is_scheduled=true, entry_computation_layout=@L

pack {
  p0 = bf16[16,1] parameter(0)
  p1 = bf16[16,1] parameter(1)
  p2 = bf16[16,1] parameter(2)
  ninf = f32[] constant(-inf)
  d0 = bf16[16,3] pad(p0, ninf), padding=0_0x0_2, metadata={op_name="@R/relu/max"}
  d1 = bf16[16,3] pad(p1, ninf), padding=0_0x1_1, metadata={op_name="@R/relu/max"}
  d2 = bf16[16,3] pad(p2, ninf), padding=0_0x2_0, metadata={op_name="@R/relu/max"}
  w0 = f32[16,3] convert(d0)
  w1 = f32[16,3] convert(d1)
  w2 = f32[16,3] convert(d2)
  m0 = f32[16,3] maximum(w0, w1), metadata={op_name="@R/relu/max"}
  m1 = f32[16,3] maximum(m0, w2), metadata={op_name="@R/relu/max"}
  ROOT n = bf16[16,3] convert(m1)
}

pack_f {
  p0 = bf16[16,1] parameter(0)
  p1 = bf16[16,1] parameter(1)
  p2 = bf16[16,1] parameter(2)
  ninf = f32[] constant(-inf)
  d0 = bf16[16,3] pad(p0, ninf), padding=0_0x0_2, metadata={op_name="@F/relu/max"}
  d1 = bf16[16,3] pad(p1, ninf), padding=0_0x1_1, metadata={op_name="@F/relu/max"}
  d2 = bf16[16,3] pad(p2, ninf), padding=0_0x2_0, metadata={op_name="@F/relu/max"}
  w0 = f32[16,3] convert(d0)
  w1 = f32[16,3] convert(d1)
  w2 = f32[16,3] convert(d2)
  m0 = f32[16,3] maximum(w0, w1), metadata={op_name="@F/relu/max"}
  m1 = f32[16,3] maximum(m0, w2), metadata={op_name="@F/relu/max"}
  ROOT n = bf16[16,3] convert(m1)
}

conv {
  a = bf16[16,3] parameter(0)
  k = bf16[3,4] parameter(1)
  ar = bf16[1,16,3] reshape(a)
  kr = bf16[1,3,4] reshape(k)
  ROOT c = f32[1,16,4] convolution(ar, kr), window={size=1}, dim_labels=b0f_0io->b0f,
    metadata={op_name="@N/Conv_1/conv_general_dilated"}
}

ENTRY main {
  x0 = bf16[16,1] parameter(0)
  x1 = bf16[16,1] parameter(1)
  x2 = bf16[16,1] parameter(2)
  k = bf16[3,4] parameter(3)
  forward = bf16[16,3] fusion(x0, x1, x2), kind=kLoop, calls=pack_f, metadata={op_name="@F/relu/max"}
  packed = bf16[16,3] fusion(x0, x1, x2), kind=kLoop, calls=pack, metadata={op_name="@R/relu/max"}, @T
  g = f32[1,16,4] fusion(packed, k), kind=kOutput, calls=conv, metadata={op_name="@N/Conv_1/conv_general_dilated"}
  ROOT out = (bf16[16,3], f32[1,16,4]) tuple(forward, g)
}
"""


def _parsed(reader: str, hlo: str = HLO):
    """@R the checkpoint's recompute, @B its backward, @N the reading convolution's name; @L the
    entry's layout and @T TPU's backend config (what makes it a TPU module)."""
    text = hlo.replace("@N", reader)
    for short, long in (("@R", "jit(loss)/transpose(jvp())/checkpoint/rematted_computation"),
                        ("@B", "jit(loss)/transpose(jvp())/checkpoint"), ("@F", "jit(loss)/jvp()"),
                        ("@L", "{(bf16[16,1]{1,0:T(8,128)})->f32[1,16,4]{2,1,0:T(8,128)}}"),
                        ("@T", 'backend_config={"scoped_memory_configs":[]}')):
        text = text.replace(short, long)
    return hloparse.parse(text)


def test_a_packing_read_by_a_backward_convolution_is_model_flops():
    index = find_remat(_parsed("@B"))
    assert ("conv", "c") not in index
    for name in ("w0", "w1", "w2", "m0", "m1", "n"):
        assert ("pack", name) not in index


def test_a_packing_no_convolution_reads_is_left_to_its_name():
    text = HLO.replace("calls=conv,", "calls=other,").replace("conv {", "other {").replace(
        "ROOT c = f32[1,16,4] convolution(ar, kr), window={size=1}, dim_labels=b0f_0io->b0f,\n",
        "ROOT c = f32[1,16,4] dot(ar, kr), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, "
        "rhs_contracting_dims={1},\n")
    index = find_remat(_parsed("@B", text))
    assert ("pack", "m1") in index
