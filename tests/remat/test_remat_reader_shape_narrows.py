"""A recomputed matmul output's narrow, fused alone with a view into one reader's shape, is left
to the range (analysis/hloflops/remat/reader_shape_narrows.py).

TPU wtpu 329 (linen_nested, fsdp): XLA narrows each decoder projection's f32 product once per
reader shape (`bf16[16,1,64]` for the scores, `bf16[16,64,1]` for the backward's matmul). The
program without remat runs both narrows in its forward; with remat the forward runs one and the
recompute the other, so the recompute's narrow is no extra work, yet the pairing by value counted
it sure (16 x 1,024 + 4 x 4,096) and the low end lay 22,528 above the truth. XLA may as well have
kept one narrow for both shapes in the program without remat, so the narrow is loose (counted, in
the range), not model FLOPs. A narrow fused with other work, or not handed out through a view,
stays as the pairing left it."""

from __future__ import annotations

import hloparse
from hloflops.remat.reader_shape_narrows import reader_shape_narrows
from hloflops.remat.sites import SiteOp

HLO = """HloModule narrows, is_scheduled=true

forward_narrow {
  p = f32[16,64] parameter(0)
  n = bf16[16,64] convert(p), metadata={op_name="jit(loss)/jvp()/key/convert_element_type"}
  ROOT b = bf16[16,1,64] bitcast(n)
}

recompute_narrow {
  p = f32[16,64] parameter(0)
  n = bf16[16,64] convert(p), metadata={op_name="@NAME"}
  ROOT @ROOT
}

ENTRY main {
  a = f32[16,64] parameter(0)
  f = bf16[16,1,64] fusion(a), kind=kLoop, calls=forward_narrow
  ROOT g = @SHAPE fusion(a), kind=kLoop, calls=recompute_narrow
}
"""

NAME = "jit(loss)/transpose(jvp())/checkpoint/rematted_computation/key/convert_element_type"


def _left_to_the_range(root: str, shape: str, paired: bool = True) -> set[str]:
    module = hloparse.parse(HLO.replace("@ROOT", root).replace("@SHAPE", shape).replace("@NAME", NAME))
    ops = []
    for comp in (module.by_name["forward_narrow"], module.by_name["recompute_narrow"]):
        for inst in comp.instructions:
            marked = "rematted_computation" in inst.op_name
            ops.append(SiteOp((comp.name, inst.name, 0), inst, inst.op_name, marked, marked, len(ops), None, None,
                              "main"))
    recompute = {op.key for op in ops if op.marked}
    return {key[1] for key in reader_shape_narrows(module, ops, recompute, recompute if paired else set())}


def test_a_recomputed_narrow_into_a_reader_shape_is_left_to_the_range():
    assert _left_to_the_range("b = bf16[16,64,1] bitcast(n)", "bf16[16,64,1]") == {"n"}


def test_a_narrow_not_paired_by_value_is_not_this_rules():
    assert _left_to_the_range("b = bf16[16,64,1] bitcast(n)", "bf16[16,64,1]", paired=False) == set()


def test_a_narrow_fused_with_other_work_stays_sure():
    assert _left_to_the_range("m = bf16[16,64] multiply(n, n)", "bf16[16,64]") == set()


def test_a_narrow_handed_out_as_it_is_stays_sure():
    assert _left_to_the_range("c = bf16[16,64] copy(n)", "bf16[16,64]") == set()
