"""A packed layer's weight gradient, which TPU writes packed or natural and the program without
remat may write the other way (analysis/hloflops/remat/weight_gradient_forms.py): a range hinge on
the weight gradient (and its own packing), never a share of the split. TPU 36, 97, 121, 165 wrote
it natural and their twins packed (the truth below the old low end: tpu 36 by 631,740,000); htpu 73
wrote it packed and its twin natural (the truth above the old high end by 21,446,688)."""

from __future__ import annotations

import hloparse
from hloflops.accounting import account
from hloflops.remat import find_remat

HLO = """HloModule forms, is_scheduled=true, entry_computation_layout=@L

pack {
  p0 = bf16[4,2,3,2,1] parameter(0)
  p1 = bf16[4,2,3,2,1] parameter(1)
  p2 = bf16[4,2,3,2,1] parameter(2)
  ninf = f32[] constant(-inf)
  d0 = bf16[4,2,3,2,3] pad(p0, ninf), padding=0_0x0_0x0_0x0_0x0_2, metadata={op_name="@B@C"}
  d1 = bf16[4,2,3,2,3] pad(p1, ninf), padding=0_0x0_0x0_0x0_0x1_1, metadata={op_name="@B@C"}
  d2 = bf16[4,2,3,2,3] pad(p2, ninf), padding=0_0x0_0x0_0x0_0x2_0, metadata={op_name="@B@C"}
  w0 = f32[4,2,3,2,3] convert(d0)
  w1 = f32[4,2,3,2,3] convert(d1)
  w2 = f32[4,2,3,2,3] convert(d2)
  m0 = f32[4,2,3,2,3] maximum(w0, w1), metadata={op_name="@B@C"}
  m1 = f32[4,2,3,2,3] maximum(m0, w2), metadata={op_name="@B@C"}
  ROOT n = bf16[4,2,3,2,3] convert(m1)
}

ENTRY main {
  x = bf16[4,2,5,2] parameter(0)
  k = bf16[3,3,2,2] parameter(1)
  fwd = f32[4,2,3,2] convolution(x, k), window={size=3x3 pad=1_1x0_0}, dim_labels=0b1f_01io->0b1f,
    metadata={op_name="@F@C"}, @T
  rec = f32[4,2,3,2] convolution(x, k), window={size=3x3 pad=1_1x0_0}, dim_labels=0b1f_01io->0b1f,
    metadata={op_name="@R@C"}
  @WGRAD
  ROOT out = (f32[4,2,3,2], f32[4,2,3,2], @SHAPE) tuple(fwd, rec, wg)
}
"""

NATURAL = """a = bf16[1,4,4,2] parameter(2)
  g = bf16[1,4,4,2] parameter(3)
  wg = f32[3,3,2,2] convolution(a, g), window={size=4x4 pad=1_1x1_1}, dim_labels=f01b_i01o->01bf,
    metadata={op_name="@B@C"}"""

PACKED = """p0 = bf16[4,2,3,2,1] parameter(2)
  p1 = bf16[4,2,3,2,1] parameter(3)
  p2 = bf16[4,2,3,2,1] parameter(4)
  g = bf16[4,2,3,2,1] parameter(5)
  pieces = bf16[4,2,3,2,3] fusion(p0, p1, p2), kind=kLoop, calls=pack, metadata={op_name="@B@C"}
  wg = f32[3,3,2,2,1] convolution(pieces, g), window={size=4x3x1 pad=1_1x0_0x0_0}, dim_labels=0f1b2_0i1o2->02bf1,
    metadata={op_name="@B@C"}"""


def _parsed(wgrad: str, shape: str, layer: str = "Conv_0"):
    """@F the forward, @R the checkpoint's recompute, @B its backward, @C the layer's convolution."""
    text = HLO.replace("@WGRAD", wgrad).replace("@SHAPE", shape).replace("@C", f"/{layer}/conv_general_dilated")
    for short, long in (("@L", "{(bf16[4,2,5,2]{3,1,2,0:T(8,128)(2,1)})->f32[4,2,3,2]{3,1,2,0:T(8,128)}}"),
                        ("@R", "jit(loss)/transpose(jvp(Net))/checkpoint/rematted_computation"),
                        ("@B", "jit(loss)/transpose(jvp(Net))/checkpoint"), ("@F", "jit(loss)/jvp(Net)"),
                        ("@T", 'backend_config={"scoped_memory_configs":[]}')):
        text = text.replace(short, long)
    return hloparse.parse(text)


# the packed forward: 2 Cin Cout x valid taps (H: 3H-2 = 10; packed W: 3 x 3 pieces) x b = 2*2*2*10*9*2
PACKED_FLOPS = 1440
# the natural weight gradient: 2 N Cin Cout (3H-2)(3W-2) = 2*1*2*2*10*10
NATURAL_FLOPS = 800


def test_natural_weight_gradient_lowers_the_low_end_by_the_packed_form_and_its_packing():
    module = _parsed(NATURAL, "f32[3,3,2,2]")
    forms = find_remat(module).twin_forms
    # the twin's packed form: the forward's count, and 30 FLOPs per H f (w+1) Cin for its pieces
    assert forms == {("main", "wg"): -(PACKED_FLOPS - NATURAL_FLOPS + 30 * 4 * 2 * 3 * 2)}
    acc = account(module, xla={"flops": 0.0})
    low, high = acc.remat_flops_bounds
    assert (low, high) == (acc.remat_flops - 640 - 1440, acc.remat_flops)
    hinge, = [h for h in acc.remat_hinges if h.twin_form]
    assert (hinge.name, hinge.opcode, hinge.twin_form, hinge.counted) == ("wg", "convolution", -1, False)


def test_packed_weight_gradient_raises_the_high_end_by_the_natural_form_and_its_own_packing():
    module = _parsed(PACKED, "f32[3,3,2,2,1]")
    forms = find_remat(module).twin_forms
    # natural at least 2 Cin Cout (3H-2)(3 f w - 2 f) with f = 2, w = 2: 2*2*2*10*8 = 640; its packing
    # fusion's ops each a hinge of their own FLOPs
    assert forms[("main", "wg")] == PACKED_FLOPS - 640
    assert {key for key, n in forms.items() if n is None} == {("pack", name) for name in (
        "p0", "p1", "p2", "ninf", "d0", "d1", "d2", "w0", "w1", "w2", "m0", "m1", "n")}
    acc = account(module, xla={"flops": 0.0})
    low, high = acc.remat_flops_bounds
    packing = sum(r.total.flops for r in acc.rows if r.computation == "pack")
    assert packing > 0
    assert (low, high) == (acc.remat_flops, acc.remat_flops + PACKED_FLOPS - 640 + packing)
    assert {h.name for h in acc.remat_hinges if h.twin_form == 1} == \
        {"wg"} | {r.name for r in acc.rows if r.computation == "pack" and r.total.flops}


def test_a_weight_gradient_without_a_packed_forward_is_no_hinge():
    """A layer whose forward is natural: no form to flip (CPU never packs)."""
    module = _parsed(NATURAL, "f32[3,3,2,2]")
    for comp, inst in module.instructions():
        if inst.name == "wg":
            assert inst.op_name.endswith("Conv_0/conv_general_dilated")
    module = _parsed(NATURAL.replace("@B@C", "@B/Conv_9/conv_general_dilated"), "f32[3,3,2,2]")
    assert not find_remat(module).twin_forms
