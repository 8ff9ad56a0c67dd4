"""Packings a layer loop's forward builds, which the program without remat's backward loop builds
again (analysis/hloflops/remat/repacked_loop_gathers.py).

Under FSDP TPU gathers a small matmul operand in windows combined by `-inf` pads and `maximum`.
Inside a layer loop the twin's backward loop packs again what this program's forward loop packed
(held-out TPU draws 113, 235, 274, 238: maximum -640 and convert -418 for 235, whose low end was
above the truth). Each forward packing op in a loop, where the backward loop packs a recomputed
layer's operands too, is a low-end hinge of one copy; unrolled layers (no `while`) are not."""

from __future__ import annotations

import hloparse
from hloflops.accounting import account
from hloflops.remat import find_remat

MODULE = """HloModule repacked_loop_gathers, is_scheduled=true, entry_computation_layout=@L

pack_fwd {
  a = f32[1,4] parameter(0)
  b = f32[1,4] parameter(1)
  inf = f32[] constant(-inf)
  pa = f32[2,4] pad(a, inf), padding=0_1x0_0
  pb = f32[2,4] pad(b, inf), padding=1_0x0_0
  ROOT m = f32[2,4] maximum(pa, pb), metadata={op_name="@F/dot_general"}
}

matmul_fwd {
  x = f32[2,4] parameter(0)
  k = f32[4,8] parameter(1)
  ROOT d = f32[2,8] dot(x, k), @D, metadata={op_name="@F/dot_general"}, @T
}

fwd_body {
  p = (s32[], f32[1,4], f32[1,4], f32[4,8]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  a = f32[1,4] get-tuple-element(p), index=1
  b = f32[1,4] get-tuple-element(p), index=2
  k = f32[4,8] get-tuple-element(p), index=3
  x = f32[2,4] fusion(a, b), kind=kLoop, calls=pack_fwd
  y = f32[2,8] fusion(x, k), kind=kOutput, calls=matmul_fwd
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
  ROOT d = f32[2,8] dot(x, k), @D, metadata={op_name="@R/dot_general"}, @T
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


def _parsed(text: str):
    """@F the forward loop's op_name prefix, @B the backward loop's (a checkpoint's), @R the
    recompute's; @D the matmul's dimension numbers, @L the entry's layout, @T TPU's backend config
    (what makes it a TPU module)."""
    text = text.replace("@P", "2") if "@P" in text else text  # the backward's packing: 4 elements
    for short, long in (("@R", "jit(loss)/transpose(jvp())/while/body/checkpoint/rematted_computation/linear"),
                        ("@B", "jit(loss)/transpose(jvp())/while/body/checkpoint/linear"),
                        ("@F", "jit(loss)/jvp()/while/body/linear"),
                        ("@D", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
                        ("@L", "{(f32[1,4]{1,0:T(8,128)})->f32[1,4]{1,0:T(8,128)}}"),
                        ("@T", 'backend_config={"scoped_memory_configs":[]}')):
        text = text.replace(short, long)
    return hloparse.parse(text)


def test_a_forward_loop_packing_is_a_low_end_hinge():
    index = find_remat(_parsed(MODULE))
    assert index.twin_copies.get(("pack_fwd", "m")) == 1
    assert ("pack_bwd", "m") not in index.twin_copies
    acc = account(_parsed(MODULE), xla={"flops": 0.0})
    low, high = acc.remat_flops_bounds
    hinge = [h for h in acc.remat_hinges if (h.computation, h.name) == ("pack_fwd", "m")]
    assert hinge and hinge[0].twin_copies == 1
    assert low <= acc.remat_flops - 8 * 3  # the forward maximum, 8 elements on each of 3 trips
    assert high == acc.remat_flops + sum(h.flops for h in acc.remat_hinges
                                         if not h.counted and not h.twin_copies and h.twin_form >= 0)


def test_without_a_backward_loop_packing_no_hinge():
    alone = MODULE.replace("calls=pack_bwd", "calls=pack_fwd_copy").replace("pack_bwd {", "pack_fwd_copy {") \
        .replace('metadata={op_name="@B/dot_general"}', 'metadata={op_name="@F/dot_general"}')
    assert ("pack_fwd", "m") not in find_remat(_parsed(alone)).twin_copies


def test_unrolled_layers_pack_alike_no_hinge():
    # The same fusions run from the entry (layers XLA unrolled: TPU draws 15, 74, where both
    # programs pack alike): no loop, no hinge.
    entry = MODULE[MODULE.index("ENTRY main"):]
    unrolled = MODULE.replace(entry, """ENTRY main {
  a0 = f32[1,4] parameter(0)
  b0 = f32[1,4] parameter(1)
  k0 = f32[4,8] parameter(2)
  x = f32[2,4] fusion(a0, b0), kind=kLoop, calls=pack_fwd
  y = f32[2,8] fusion(x, k0), kind=kOutput, calls=matmul_fwd
  sa = f32[1,@P] slice(a0), slice={[0:1], [0:@P]}
  sb = f32[1,@P] slice(b0), slice={[0:1], [0:@P]}
  xb = f32[2,@P] fusion(sa, sb), kind=kLoop, calls=pack_bwd
  ROOT yb = f32[2,8] fusion(x, k0), kind=kOutput, calls=matmul_rec
}
""").replace("entry_computation_layout=@L",
              "entry_computation_layout={(f32[1,4]{1,0:T(8,128)})->f32[2,8]{1,0:T(8,128)}}")
    assert ("pack_fwd", "m") not in find_remat(_parsed(unrolled)).twin_copies


def test_a_backward_loop_packing_as_much_as_the_forward_no_hinge():
    # The backward loop packs as many elements as the forward's (held-out TPU 146, a layer stack
    # saving named values: the same packings in both programs, exact): it may already pack each
    # forward value again, as the twin's does.
    assert ("pack_fwd", "m") not in find_remat(_parsed(MODULE.replace("@P", "4"))).twin_copies
