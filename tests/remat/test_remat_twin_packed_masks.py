"""Relu masks recomputed inside their select's fusion, which the program without remat may pack
into bits (analysis/hloflops/remat/twin_packed_masks.py).

TPU draw wtpu 301 (linen_nested conv, save_and_offload_only_these_names, tensor parallel): the
recompute computes each block's mask `x > 0` in the one backward fusion that computes relu's select
(with the bias gradient's reduce and the select's narrow for two convolutions). The program without
remat computed the masks in its forward and handed them to its backward packed a bit per element,
unpacking them in three fusions, each with its own select: 1.59M FLOPs (shift-left, and, select,
converts, reduces) it runs and this program does not. The report was a single confident number
above the truth ([15,930,368, 15,930,368], truth 14,336,992); on vtpu 259, utpu 121 and tpu 97 the
same sign stands where the twin stored the preactivation and packed nothing. So a `twin_copies`
hinge on the compare (the range's low end), never a sure share. A small hand-written TPU module:
the recompute's convolution fusion hands the preactivation to the mask's fusion, which hands out the
bias gradient and the select narrowed for two convolution fusions."""

from __future__ import annotations

import hloparse
from hloflops.accounting import account
from hloflops.remat.by_platform import Decided
from hloflops.remat.sites import SiteOp
from hloflops.remat.twin_packed_masks import shared_mask_packings
from tests.remat.test_remat_packed_masks import _RECOMPUTE as _PACKED_RECOMPUTE
from tests.remat.test_remat_packed_masks import _T as PACKED_T
from tests.remat.test_remat_packed_masks import HLO as PACKED

_R = "jit(loss)/transpose(jvp(ConvNet))/jvp(ConvNet)/checkpoint/stack/checkpoint/rematted_computation/block_0"
_G = "jit(loss)/transpose(jvp(ConvNet))/jvp(ConvNet)/checkpoint/stack/checkpoint/block_0"
_TPU = 'backend_config={"scoped_memory_configs":[]}'
_CONV = "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f"
_WGRAD = "window={size=8x8 pad=1_1x1_1}, dim_labels=f01b_i01o->01bf"
_T = "{3,2,1,0:T(8,128)}"  # TPU's tiled layouts
_LAYOUT = (f"{{(f32[2,8,8,16]{_T}, f32[3,3,16,16]{_T}, f32[2,8,8,16]{_T})"
           f"->(f32[16]{{0:T(128)}}, f32[2,8,8,16]{_T}, f32[3,3,16,16]{_T})}}")

MODULE = """HloModule masks, is_scheduled=true, entry_computation_layout=@L

region.add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

recompute.f {
  x = f32[2,8,8,16] parameter(0)
  w = f32[3,3,16,16] parameter(1)
  ROOT h = f32[2,8,8,16] convolution(x, w), @CONV, metadata={op_name="@R/Conv_0/conv_general_dilated"}
}

mask.f {
  h = f32[2,8,8,16] parameter(0)
  g = f32[2,8,8,16] parameter(1)
  zero = f32[] constant(0)
  zeros = f32[2,8,8,16] broadcast(zero), dimensions={}
  gt = pred[2,8,8,16] @CMP
  sel = f32[2,8,8,16] select(gt, g, zeros), metadata={op_name="@G/select_n"}
  db = f32[16] reduce(sel, zero), dimensions={0,1,2}, to_apply=region.add, metadata={op_name="@G/Conv_0/reduce_sum"}
  n = bf16[2,8,8,16] convert(sel)
  ROOT t = (f32[16], bf16[2,8,8,16]) tuple(db, n)
}

dx.f {
  d = bf16[2,8,8,16] parameter(0)
  w = f32[3,3,16,16] parameter(1)
  dw = bf16[3,3,16,16] convert(w)
  c = bf16[2,8,8,16] convolution(d, dw), @CONV, metadata={op_name="@G/Conv_0/conv_general_dilated"}
  ROOT o = f32[2,8,8,16] convert(c)
}

dw.f {
  x = f32[2,8,8,16] parameter(0)
  d = bf16[2,8,8,16] parameter(1)
  bx = bf16[2,8,8,16] convert(x)
  c = bf16[3,3,16,16] convolution(bx, d), @WGRAD, metadata={op_name="@G/Conv_0/conv_general_dilated"}
  ROOT o = f32[3,3,16,16] convert(c)
}

ENTRY main {
  x = f32[2,8,8,16] parameter(0)
  w = f32[3,3,16,16] parameter(1)
  g = f32[2,8,8,16] parameter(2)
  h = f32[2,8,8,16] fusion(x, w), kind=kOutput, calls=recompute.f,
      metadata={op_name="@R/Conv_0/conv_general_dilated"}, @TPU
  m = (f32[16], bf16[2,8,8,16]) fusion(h, g), kind=kLoop, calls=mask.f, metadata={op_name="@G/Conv_0/reduce_sum"}
  db = f32[16] get-tuple-element(m), index=0
  d = bf16[2,8,8,16] get-tuple-element(m), index=1
  dx = f32[2,8,8,16] fusion(d, w), kind=kOutput, calls=dx.f, metadata={op_name="@G/Conv_0/conv_general_dilated"}
  dw = f32[3,3,16,16] fusion(x, d), kind=kOutput, calls=dw.f, metadata={op_name="@G/Conv_0/conv_general_dilated"}
  ROOT r = (f32[16], f32[2,8,8,16], f32[3,3,16,16]) tuple(db, dx, dw)
}
"""

_MASK = 'compare(h, zeros), direction=GT, metadata={op_name="@R/gt"}'


def _account(mask: str = _MASK, readers: str = "sel", gradients: str = "Conv_0/conv_general_dilated"):
    text = MODULE.replace("@CMP", mask).replace("@G/Conv_0/conv_general_dilated", "@G/" + gradients)
    if readers != "sel":  # the mask handed out of its fusion too
        text = text.replace("ROOT t = (f32[16], bf16[2,8,8,16]) tuple(db, n)",
                            "ROOT t = (f32[16], bf16[2,8,8,16], pred[2,8,8,16]) tuple(db, n, gt)")
        text = text.replace("m = (f32[16], bf16[2,8,8,16]) fusion",
                            "m = (f32[16], bf16[2,8,8,16], pred[2,8,8,16]) fusion")
    for short, long in (("@R", _R), ("@G", _G), ("@TPU", _TPU), ("@CONV", _CONV), ("@WGRAD", _WGRAD),
                        ("@L", _LAYOUT)):
        text = text.replace(short, long)
    return account(hloparse.parse(text), xla={"flops": 0.0})


def _mask_hinges(acc):
    return [(h.computation, h.name, h.twin_copies, h.flops) for h in acc.remat_hinges
            if h.twin_copies and h.opcode == "compare"]


def test_a_mask_recomputed_inside_its_select_fusion_is_a_hinge_of_the_twins_packing():
    # The select's value is read three times (the bias gradient's reduce, the two convolutions):
    # packing (4 per element) and three unpacks with their selects (5 each), less this program's
    # select: 18 per element of the 2,048-element mask, off the low end only.
    acc = _account()
    assert _mask_hinges(acc) == [("mask.f", "gt", 18, 18 * 2048)]
    low, high = acc.remat_flops_bounds
    assert high == acc.remat_flops + sum(h.flops for h in acc.remat_hinges if not h.counted and not h.twin_copies
                                         and h.twin_form >= 0)
    assert low <= acc.remat_flops - 18 * 2048


def test_a_mask_handed_out_of_its_fusion_is_not():
    # This program stores the mask itself (unpacked): so does its twin, nothing to pack more.
    assert _mask_hinges(_account(readers="out")) == []


def test_a_mask_of_a_bias_add_in_its_own_fusion_is_not():
    # The compare reads no handed-in preactivation (wtpu 47: the twin stores the convolution's
    # output and packs nothing): left alone.
    acc = _account(mask='compare(zeros, zeros), direction=GT, metadata={op_name="@R/gt"}')
    assert _mask_hinges(acc) == []


def test_a_mask_of_a_matmul_layer_is_not():
    # The select's value read by no spatial convolution (a dense layer's gradients, TPU writing
    # them as convolutions): no program of TPU draws 0-359 packs such a mask (tpu 22, 35: exact).
    assert _mask_hinges(_account(gradients="Dense_0/dot_general")) == []


# A recomputed mask this program packs outside a scan's backward loop (wtpu 304: the unpacks' widens
# of the packed word counted sure remat, the range's low end 131,072 above the truth): the program
# without remat packs its forward's mask alike (every TPU draw 0-359 where this program so packs),
# so the packing and the unpacks are model FLOPs, settled (twin_packed_masks.shared_mask_packings).
# The hand-written pack/unpack pair of hloflops.remat.packed_masks' test, read in two frames.

def _settled(frame: str, name: str = _PACKED_RECOMPUTE) -> tuple[set[str], set[str]]:
    module = hloparse.parse(PACKED.replace("@T", PACKED_T).replace("@NAME", name))
    ops = [SiteOp((comp, inst.name, 0), inst, inst.op_name, inst.name == "gt" and "rematted" in name,
                  inst.name == "gt" and "rematted" in name, i, None, None, frame)
           for comp in ("pack", "unpack") for i, inst in enumerate(module.by_name[comp].instructions)]
    every = {op.key for op in ops}
    decided = Decided(set(every), set(), set(every), set())  # as if other rules counted all of them
    shared_mask_packings(module, ops, decided)
    names = {f"{key[0]}.{key[1]}" for key in every - decided.remat}
    return names, {f"{key[0]}.{key[1]}" for key in decided.certain}


def test_a_recomputed_mask_packed_outside_a_scan_loop_is_model_flops_with_its_unpacks():
    taken, certain = _settled("main")
    assert taken == certain == {"pack.w", "pack.s", "pack.r", "unpack.pb", "unpack.bit", "unpack.a", "unpack.m"}


def test_a_mask_packed_in_a_scan_backward_loop_is_left_to_packed_masks():
    assert _settled("body") == (set(), set())


def test_a_forward_mask_packed_is_left_alone():
    assert _settled("main", "jit(loss)/jvp(Net)/gt") == (set(), set())
