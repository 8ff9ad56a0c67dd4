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


NESTED = """HloModule nested, is_scheduled=true, entry_computation_layout=@L

mpack {
  p0 = bf16[4,1] parameter(0)
  p1 = bf16[4,2] parameter(1)
  zero = bf16[] constant(0)
  ninf = bf16[] constant(-inf)
  io = s32[4,3] iota(), iota_dimension=1, metadata={op_name="@R/relu/max"}
  one = s32[] constant(1)
  b1 = s32[4,3] broadcast(one), dimensions={}
  lt = pred[4,3] compare(io, b1), direction=LT, metadata={op_name="@R/relu/max"}
  z0 = bf16[4,3] pad(p0, zero), padding=0_0x0_2, metadata={op_name="@R/relu/max"}
  bn = bf16[4,3] broadcast(ninf), dimensions={}
  s0 = bf16[4,3] select(lt, z0, bn), metadata={op_name="@R/relu/max"}
  w0 = f32[4,3] convert(s0)
  d1 = bf16[4,3] pad(p1, ninf), padding=0_0x1_0, metadata={op_name="@R/relu/max"}
  w1 = f32[4,3] convert(d1)
  m = f32[4,3] maximum(w0, w1), metadata={op_name="@R/relu/max"}
  n = bf16[4,3] convert(m)
  ROOT r = bf16[1,4,3] reshape(n)
}

mpack_f {
  p0 = bf16[4,1] parameter(0)
  p1 = bf16[4,2] parameter(1)
  zero = bf16[] constant(0)
  ninf = bf16[] constant(-inf)
  io = s32[4,3] iota(), iota_dimension=1, metadata={op_name="@F/relu/max"}
  one = s32[] constant(1)
  b1 = s32[4,3] broadcast(one), dimensions={}
  lt = pred[4,3] compare(io, b1), direction=LT, metadata={op_name="@F/relu/max"}
  z0 = bf16[4,3] pad(p0, zero), padding=0_0x0_2, metadata={op_name="@F/relu/max"}
  bn = bf16[4,3] broadcast(ninf), dimensions={}
  s0 = bf16[4,3] select(lt, z0, bn), metadata={op_name="@F/relu/max"}
  w0 = f32[4,3] convert(s0)
  d1 = bf16[4,3] pad(p1, ninf), padding=0_0x1_0, metadata={op_name="@F/relu/max"}
  w1 = f32[4,3] convert(d1)
  m = f32[4,3] maximum(w0, w1), metadata={op_name="@F/relu/max"}
  n = bf16[4,3] convert(m)
  ROOT r = bf16[1,4,3] reshape(n)
}

convf {
  a0 = bf16[4,1] parameter(0)
  a1 = bf16[4,2] parameter(1)
  k = bf16[@W,3,5] parameter(2)
  packed = bf16[1,4,3] fusion(a0, a1), kind=kLoop, calls=mpack, metadata={op_name="@R/relu/max"}
  ROOT c = f32[1,4,5] convolution(packed, k), window={size=@W pad=@P}, dim_labels=b0f_0io->b0f,
    metadata={op_name="@F/Conv_1/conv_general_dilated"}
}

ENTRY main {
  x0 = bf16[4,1] parameter(0)
  x1 = bf16[4,2] parameter(1)
  k = bf16[@W,3,5] parameter(2)
  f = bf16[1,4,3] fusion(x0, x1), kind=kLoop, calls=mpack_f, metadata={op_name="@F/relu/max"}
  g = f32[1,4,5] fusion(x0, x1, k), kind=kOutput, calls=convf,
    metadata={op_name="@F/Conv_1/conv_general_dilated"}, @T
  ROOT out = (bf16[1,4,3], f32[1,4,5]) tuple(f, g)
}
"""


def _nested(window: int):
    text = NESTED.replace("@W", str(window)).replace("@P", "1_1" if window == 3 else "0_0").replace(
        "@L", "{(bf16[4,1]{1,0:T(8,128)})->f32[1,4,5]{2,1,0:T(8,128)}}")
    return _parsed("@F", text)


def test_a_packing_nested_in_a_forward_convolution_counts_with_it_its_halo_mask_unsure():
    """The packing in the forward convolution's own fusion, its zero-halo piece masked to `-inf` by
    a select on an iota comparison: model FLOPs with the convolution, though it carries the
    recompute's name; the mask (compare, select) unsure, since the program without remat may pad
    that piece once, unfused, for this packing and its weight gradient's (TPU draw 16)."""
    index = find_remat(_nested(3))
    for name in ("lt", "s0", "w0", "w1", "m", "n"):
        assert ("mpack", name) not in index.remat, name
    assert {("mpack", "lt"), ("mpack", "s0")} <= index.unsure
    assert ("mpack", "m") not in index.unsure


def test_a_one_tap_convolution_is_a_matmul_not_a_packings_reader():
    """A 1-tap convolution is TPU's matmul (an LSTM's gates concatenated the same way, TPU draw
    53): its operand's concatenation is left to its name."""
    index = find_remat(_nested(1))
    assert ("mpack", "m") in index.remat


def test_a_packing_read_by_a_second_packing_follows_the_convolution_reading_that():
    """The weight gradient's window packs pieces that are packings themselves: the inner one (the
    recompute's, by its name) follows the backward convolution reading the outer one, model FLOPs;
    its halo mask unsure (TPU draw 16: six such inner packings' converts counted remat)."""
    nested = NESTED.replace("@W", "3").replace("@P", "1_1")
    start = nested.index("convf {")
    text = nested[:start] + """opack {
  q = bf16[1,4,3] parameter(0)
  ninf = bf16[] constant(-inf)
  dq = bf16[1,4,4] pad(q, ninf), padding=0_0x0_0x0_1, metadata={op_name="@R/relu/max"}
  wq = f32[1,4,4] convert(dq)
  e = bf16[1,4,4] pad(q, ninf), padding=0_0x0_0x1_0, metadata={op_name="@R/relu/max"}
  we = f32[1,4,4] convert(e)
  mx = f32[1,4,4] maximum(wq, we), metadata={op_name="@R/relu/max"}
  ROOT nn = bf16[1,4,4] convert(mx)
}

convw {
  a = bf16[1,4,4] parameter(0)
  k = bf16[3,4,5] parameter(1)
  ROOT c = f32[1,4,5] convolution(a, k), window={size=3 pad=1_1}, dim_labels=b0f_0io->b0f,
    metadata={op_name="@B/Conv_1/conv_general_dilated"}
}

ENTRY main {
  x0 = bf16[4,1] parameter(0)
  x1 = bf16[4,2] parameter(1)
  k = bf16[3,4,5] parameter(2)
  f = bf16[1,4,3] fusion(x0, x1), kind=kLoop, calls=mpack_f, metadata={op_name="@F/relu/max"}
  inner = bf16[1,4,3] fusion(x0, x1), kind=kLoop, calls=mpack, metadata={op_name="@R/relu/max"}
  outer = bf16[1,4,4] fusion(inner), kind=kLoop, calls=opack, metadata={op_name="@R/relu/max"}
  g = f32[1,4,5] fusion(outer, k), kind=kOutput, calls=convw,
    metadata={op_name="@B/Conv_1/conv_general_dilated"}, @T
  ROOT out = (bf16[1,4,3], f32[1,4,5]) tuple(f, g)
}
"""
    index = find_remat(_parsed("@B", text.replace("@L", "{(bf16[4,1]{1,0:T(8,128)})->f32[1,4,5]{2,1,0:T(8,128)}}")))
    for name in ("w0", "w1", "m", "n"):
        assert ("mpack", name) not in index.remat, name
    assert {("mpack", "lt"), ("mpack", "s0")} <= index.unsure
