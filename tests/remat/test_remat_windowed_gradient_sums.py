"""The partial sums of a weight gradient the program without remat may compute window by window
(analysis/hloflops/remat/windowed_gradient_sums.py).

Under FSDP TPU runs a layer loop's forward matmul as a windowed einsum: one convolution per window,
each reading a packing of `-inf` pads and maximums. The twin's backward loop packs those windows
again (hloflops.remat.repacked_loop_gathers) and may compute the layer's weight gradient window by
window, adding the partial gradients: an `add` of the kernel's elements per window beyond the
first, which this program, whose recompute gathered the operand whole, does not run (held-out TPU
274 and 399: add +3,072 over the truth, the low end above it). Each such window is a low-end
hinge of one add, never a share of the split."""

from __future__ import annotations

import hloparse
from hloflops.accounting import account
from hloflops.remat import find_remat

MODULE = """HloModule windowed_gradient_sums, is_scheduled=true, entry_computation_layout=@L

pack_fwd0 {
  a = f32[1,4] parameter(0)
  b = f32[1,4] parameter(1)
  inf = f32[] constant(-inf)
  pa = f32[2,4] pad(a, inf), padding=0_1x0_0
  pb = f32[2,4] pad(b, inf), padding=1_0x0_0
  ROOT m = f32[2,4] maximum(pa, pb), metadata={op_name="@F/dot_general"}
}

pack_fwd1 {
  a = f32[1,4] parameter(0)
  b = f32[1,4] parameter(1)
  inf = f32[] constant(-inf)
  pa = f32[2,4] pad(a, inf), padding=1_0x0_0
  pb = f32[2,4] pad(b, inf), padding=0_1x0_0
  ROOT m = f32[2,4] maximum(pa, pb), metadata={op_name="@F/dot_general"}
}

window0 {
  a = f32[1,4] parameter(0)
  b = f32[1,4] parameter(1)
  k = f32[4,8] parameter(2)
  x = f32[2,4] fusion(a, b), kind=kLoop, calls=pack_fwd0
  ROOT c = f32[2,8] convolution(x, k), dim_labels=bf_io->bf, metadata={op_name="@F/dot_general"}, @T
}

window1 {
  a = f32[1,4] parameter(0)
  b = f32[1,4] parameter(1)
  k = f32[4,8] parameter(2)
  x = f32[2,4] fusion(a, b), kind=kLoop, calls=pack_fwd1
  ROOT c = f32[2,8] convolution(x, k), dim_labels=bf_io->bf, metadata={op_name="@F/dot_general"}, @T
}

fwd_body {
  p = (s32[], f32[1,4], f32[1,4], f32[4,8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  a = f32[1,4] get-tuple-element(p), index=1
  b = f32[1,4] get-tuple-element(p), index=2
  k = f32[4,8] get-tuple-element(p), index=3
  y0 = f32[2,8] fusion(a, b, k), kind=kOutput, calls=window0
  @W
  one = s32[] constant(1)
  n = s32[] add(i, one)
  ROOT t = (s32[], f32[1,4], f32[1,4], f32[4,8]) tuple(n, a, b, k)
}

fwd_cond {
  p = (s32[], f32[1,4], f32[1,4], f32[4,8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  c = s32[] constant(3)
  ROOT lt = pred[] compare(i, c), direction=LT
}

pack_bwd {
  a = f32[1,@P] parameter(0)
  b = f32[1,@P] parameter(1)
  inf = f32[] constant(-inf)
  pa = f32[2,@P] pad(a, inf), padding=0_1x0_0
  pb = f32[2,@P] pad(b, inf), padding=1_0x0_0
  ROOT m = f32[2,@P] maximum(pa, pb), metadata={op_name="@B/dot_general"}
}

matmul_rec {
  x = f32[2,4] parameter(0)
  k = f32[4,8] parameter(1)
  ROOT d = f32[2,8] convolution(x, k), dim_labels=bf_io->bf, metadata={op_name="@R/dot_general"}, @T
}

bwd_body {
  p = (s32[], f32[1,4], f32[1,4], f32[4,8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  a = f32[1,4] get-tuple-element(p), index=1
  b = f32[1,4] get-tuple-element(p), index=2
  k = f32[4,8] get-tuple-element(p), index=3
  sa = f32[1,@P] slice(a), slice={[0:1], [0:@P]}
  sb = f32[1,@P] slice(b), slice={[0:1], [0:@P]}
  xb = f32[2,@P] fusion(sa, sb), kind=kLoop, calls=pack_bwd
  x = f32[2,4] concatenate(a, b), dimensions={0}
  y = f32[2,8] fusion(x, k), kind=kOutput, calls=matmul_rec
  one = s32[] constant(1)
  n = s32[] add(i, one)
  ROOT t = (s32[], f32[1,4], f32[1,4], f32[4,8]) tuple(n, a, b, k)
}

bwd_cond {
  p = (s32[], f32[1,4], f32[1,4], f32[4,8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  c = s32[] constant(3)
  ROOT lt = pred[] compare(i, c), direction=LT
}

ENTRY main {
  a0 = f32[1,4] parameter(0)
  b0 = f32[1,4] parameter(1)
  k0 = f32[4,8] parameter(2)
  z = s32[] constant(0)
  s = (s32[], f32[1,4], f32[1,4], f32[4,8]) tuple(z, a0, b0, k0)
  f = (s32[], f32[1,4], f32[1,4], f32[4,8]) while(s), condition=fwd_cond, body=fwd_body
  g = (s32[], f32[1,4], f32[1,4], f32[4,8]) while(f), condition=bwd_cond, body=bwd_body
  ROOT out = f32[1,4] get-tuple-element(g), index=1
}
"""

SECOND_WINDOW = "y1 = f32[2,8] fusion(a, b, k), kind=kOutput, calls=window1"


def _parsed(text: str, packed: int = 2, second: str = SECOND_WINDOW):
    """@F the forward loop's op_name prefix, @B the backward loop's (a checkpoint's), @R the
    recompute's; @P the backward packing's width (2: fewer elements than the forward's), @W the
    forward's second window; @L the entry's layout, @T TPU's backend config (a TPU module)."""
    text = text.replace("@P", str(packed)).replace("@W", second)
    for short, long in (("@R", "jit(loss)/transpose(jvp())/while/body/checkpoint/rematted_computation/linear"),
                        ("@B", "jit(loss)/transpose(jvp())/while/body/checkpoint/linear"),
                        ("@F", "jit(loss)/jvp()/while/body/linear"),
                        ("@L", "{(f32[1,4]{1,0:T(8,128)})->f32[1,4]{1,0:T(8,128)}}"),
                        ("@T", 'backend_config={"scoped_memory_configs":[]}')):
        text = text.replace(short, long)
    return hloparse.parse(text)


def test_a_forward_windowed_matmul_second_window_is_a_low_end_add_hinge():
    index = find_remat(_parsed(MODULE))
    assert dict(index.twin_sums) == {("window1", "c"): 4 * 8}  # one add of the kernel's elements
    acc = account(_parsed(MODULE), xla={"flops": 0.0})
    hinge = [h for h in acc.remat_hinges if (h.computation, h.name) == ("window1", "c")]
    assert len(hinge) == 1 and hinge[0].opcode == "add" and hinge[0].twin_copies == 1
    assert hinge[0].flops == 4 * 8 * 3  # on each of 3 trips
    low, high = acc.remat_flops_bounds
    # the low end only: the twin may add the partial weight gradients, never fewer FLOPs
    assert low == acc.remat_flops - sum(h.flops for h in acc.remat_hinges if h.counted or h.twin_copies)
    assert high == acc.remat_flops + sum(h.flops for h in acc.remat_hinges
                                         if not h.counted and not h.twin_copies and h.twin_form >= 0)


def test_one_window_no_partial_sum():
    assert not find_remat(_parsed(MODULE, second="")).twin_sums


def test_without_repacked_gathers_no_partial_sum():
    # The backward loop packs as many elements as the forward's two windows (repacked_loop_gathers
    # silent: it may pack and window as the twin does), so nothing tells the twin runs more adds.
    assert not find_remat(_parsed(MODULE, packed=8)).twin_sums
