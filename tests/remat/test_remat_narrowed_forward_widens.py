"""A forward fusion's widen of its own bf16 matmul output, handing out only the narrowed relu
activation, where a recompute runs the matmul again: a hinge (hloflops.remat.narrowed_forward_widens;
TPU draws 22, 84, 241: the twin's convolution writes the f32 pre-activation it stores, no widen)."""

from __future__ import annotations

import pytest

import hloparse
from hloflops.remat.narrowed_forward_widens import narrowed_forward_widens

_HLO = """HloModule m

%relu_fusion (p0: bf16[8,128], p1: bf16[128,128]) -> bf16[8,128] {
  %p0 = bf16[8,128]{1,0} parameter(0)
  %p1 = bf16[128,128]{1,0} parameter(1)
  %convolution.1 = bf16[8,128]{1,0} convolution(%p0, %p1), dim_labels=bf_io->bf,
    metadata={op_name="jit(loss)/jvp()/dot_general"}
  %convert.1 = f32[8,128]{1,0} convert(%convolution.1)
  %zero = f32[] constant(0)
  %zeros = f32[8,128]{1,0} broadcast(%zero), dimensions={}
  %max.1 = f32[8,128]{1,0} maximum(%convert.1, %zeros), metadata={op_name="jit(loss)/jvp()/jit(relu)/max"}
  ROOT %convert.2 = bf16[8,128]{1,0} convert(%max.1)
}

%recompute_fusion (q0: bf16[8,128], q1: bf16[128,128]) -> f32[8,128] {
  %q0 = bf16[8,128]{1,0} parameter(0)
  %q1 = bf16[128,128]{1,0} parameter(1)
  ROOT %convolution.2 = f32[8,128]{1,0} convolution(%q0, %q1), dim_labels=bf_io->bf,
    metadata={op_name="jit(loss)/jvp()/RECOMPUTE/dot_general"}
}

ENTRY %main (a: bf16[8,128], w: bf16[128,128]) -> (bf16[8,128], f32[8,128]) {
  %a = bf16[8,128]{1,0} parameter(0)
  %w = bf16[128,128]{1,0} parameter(1)
  %fusion.1 = bf16[8,128]{1,0} fusion(%a, %w), kind=kOutput, calls=%relu_fusion
  %fusion.2 = f32[8,128]{1,0} fusion(%a, %w), kind=kOutput, calls=%recompute_fusion
  ROOT %t = (bf16[8,128]{1,0}, f32[8,128]{1,0}) tuple(%fusion.1, %fusion.2)
}
"""


def test_widen_of_a_recomputed_relu_matmul_is_found() -> None:
    module = hloparse.parse(_HLO.replace("RECOMPUTE", "checkpoint/rematted_computation"))
    assert narrowed_forward_widens(module) == {("relu_fusion", "convert.1")}


def test_no_widen_where_no_recompute_runs_the_matmul() -> None:
    # the policy saved the matmul's output: no recompute of it, the twin's forward is this one's
    module = hloparse.parse(_HLO.replace("RECOMPUTE/", ""))
    assert narrowed_forward_widens(module) == set()


def test_no_widen_where_the_fusion_hands_out_f32() -> None:
    # the fusion's root is the f32 activation: this program stores what the twin stores
    hlo = _HLO.replace("RECOMPUTE", "checkpoint/rematted_computation").replace(
        "ROOT %convert.2 = bf16[8,128]{1,0} convert(%max.1)", "%convert.2 = bf16[8,128]{1,0} convert(%max.1)\n"
        "  ROOT %out = f32[8,128]{1,0} copy(%max.1)").replace(
        "p1: bf16[128,128]) -> bf16[8,128]", "p1: bf16[128,128]) -> f32[8,128]").replace(
        "%fusion.1 = bf16[8,128]{1,0} fusion", "%fusion.1 = f32[8,128]{1,0} fusion").replace(
        "-> (bf16[8,128], f32[8,128])",
        "-> (f32[8,128], f32[8,128])").replace(
        "ROOT %t = (bf16[8,128]{1,0}", "ROOT %t = (f32[8,128]{1,0}")
    assert narrowed_forward_widens(hloparse.parse(hlo)) == set()


def test_drawn_tpu_relu_widens_put_the_truth_inside_the_range(monkeypatch) -> None:
    # TPU draw 84 (whole model, nothing_saveable, relu, fsdp): convert under-counted by 2,048 and out
    # of range before; the three widens' hinge raises the high end, the count stays
    pytest.importorskip("libtpu", reason="libtpu is not installed: no TPU compiler to build the programs with")
    from tests.remat.test_remat_tpu_generated import _checked
    outcome = _checked(84, monkeypatch)
    verdict = next(v for v in outcome.verdicts if v.stage == "after")
    assert verdict.in_bounds, verdict.describe()
    assert outcome.matmul_ok("after"), outcome.describe()
