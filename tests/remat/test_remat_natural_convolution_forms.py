"""A 3x3 convolution TPU runs natural where the same program packs that geometry, as host offload
pins a saved activation's layout (analysis/hloflops/remat/natural_convolution_forms.py): the
program without remat, offloading nothing, may pack it; a low-end range hinge, never the split.
TPU vtpu 250, 259, 296 ran forward convolutions and their weight gradients natural and their
twins packed: truths -966M, -69M, -286M below the old low ends (-325M, -26M, -59M)."""

from __future__ import annotations

import hloparse
from hloflops.accounting import account
from hloflops.remat import find_remat

HLO = """HloModule forms, is_scheduled=true, entry_computation_layout=@L

ENTRY main {
  x = bf16[4,2,5,2] parameter(0)
  k = bf16[3,3,2,2] parameter(1)
  a = f32[1,4,4,2] parameter(2)
  k0 = f32[3,3,2,2] parameter(3)
  g = f32[1,4,4,2] parameter(4)
  packed = f32[4,2,3,2] convolution(x, k), window={size=3x3 pad=1_1x0_0}, dim_labels=0b1f_01io->0b1f,
    metadata={op_name="@F/Conv_1/conv_general_dilated"}, @T
  rec = f32[4,2,3,2] convolution(x, k), window={size=3x3 pad=1_1x0_0}, dim_labels=0b1f_01io->0b1f,
    metadata={op_name="@R/Conv_1/conv_general_dilated"}
  natural = f32[1,4,4,2] convolution(a, k0), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f,
    metadata={op_name="@F/Conv_0/conv_general_dilated"}
  wg = f32[3,3,2,2] convolution(a, g), window={size=4x4 pad=1_1x1_1}, dim_labels=f01b_i01o->01bf,
    metadata={op_name="@B/Conv_0/conv_general_dilated"}
  dg = f32[1,4,4,2] convolution(g, k0), window={size=3x3 pad=1_1x1_1 rhs_reversal=1x1},
    dim_labels=b01f_01oi->b01f, metadata={op_name="@B/Conv_0/conv_general_dilated"}
  ROOT out = (f32[4,2,3,2], f32[4,2,3,2], f32[1,4,4,2], f32[3,3,2,2], f32[1,4,4,2]) tuple(packed, rec, natural, wg, dg)
}
"""


def _parsed(text: str = HLO):
    for short, long in (("@L", "{(bf16[4,2,5,2]{3,1,2,0:T(8,128)(2,1)})->f32[4,2,3,2]{3,1,2,0:T(8,128)}}"),
                        ("@R", "jit(loss)/transpose(jvp(Net))/checkpoint/rematted_computation"),
                        ("@B", "jit(loss)/transpose(jvp(Net))/checkpoint"), ("@F", "jit(loss)/jvp(Net)"),
                        ("@T", 'backend_config={"scoped_memory_configs":[]}')):
        text = text.replace(short, long)
    return hloparse.parse(text)


# the packed forward: 2 Cin Cout x valid taps (H: 3H-2 = 10; packed W: 3 x 3 pieces) x b = 2*2*2*10*9*2,
# 360 per channel pair; natural: 2 N Cin Cout (3H-2)(3W-2) = 2*1*2*2*10*10
PACKED_FLOPS = 1440
NATURAL_FLOPS = 800
# the twin's packing of the input: 30 FLOPs per H f w Cin of the packed output's geometry (4, 2, 3)
PACKING = 30 * 4 * 2 * 3 * 2


def test_natural_forward_and_its_weight_gradient_beside_a_packed_forward_lower_the_low_end():
    module = _parsed()
    forms = find_remat(module).twin_forms
    drop = -(PACKED_FLOPS - NATURAL_FLOPS + PACKING)
    assert forms == {("main", "natural"): drop, ("main", "wg"): drop}  # the data gradient left
    acc = account(module, xla={"flops": 0.0})
    assert acc.remat_flops_bounds == (acc.remat_flops + 2 * drop, acc.remat_flops)
    assert {(h.name, h.twin_form, h.counted) for h in acc.remat_hinges if h.twin_form} == \
        {("natural", -1, False), ("wg", -1, False)}


def test_no_packed_forward_of_that_geometry_is_no_hinge():
    """Every convolution natural (small images), or the packed one of another image height: both
    programs agree (TPU 18, 47, 64 natural in both)."""
    assert not find_remat(_parsed(HLO.replace("dim_labels=0b1f_01io->0b1f", "dim_labels=b01f_01io->b01f")
                                  .replace("pad=1_1x0_0", "pad=1_1x1_1"))).twin_forms
    other = HLO.replace("x = bf16[4,2,5,2]", "x = bf16[6,2,5,2]") \
        .replace("packed = f32[4,2,3,2]", "packed = f32[6,2,3,2]") \
        .replace("(f32[4,2,3,2], f32[4,2,3,2]", "(f32[6,2,3,2], f32[6,2,3,2]") \
        .replace("rec = f32[4,2,3,2]", "rec = f32[6,2,3,2]")
    assert not find_remat(_parsed(other)).twin_forms


def test_a_weight_gradient_of_a_packed_layer_stays_weight_gradient_forms():
    """The layer's forward packed here: hloflops.remat.weight_gradient_forms's hinge alone."""
    module = _parsed(HLO.replace("@B/Conv_0/conv_general_dilated\"}\n  dg", "@B/Conv_1/conv_general_dilated\"}\n  dg"))
    forms = find_remat(module).twin_forms
    assert forms[("main", "natural")] == -(PACKED_FLOPS - NATURAL_FLOPS + PACKING)
    assert forms[("main", "wg")] == -(PACKED_FLOPS - NATURAL_FLOPS + 30 * 4 * 2 * 3 * 2)  # its rule's count
