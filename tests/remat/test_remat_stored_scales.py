"""A loss-gradient scale `g = (pred - y) * c` that a matmul's output fusion computes once and
stores, read by k fusions and ops (the weight's gradient matmul, the input gradient's, the bias
gradient's reduce): the program without remat may output `pred - y` from that fusion and copy the
cheap scale into each reader, k copies against this program's one (hloflops.remat.stored_scales).
The per-opcode truth is then negative, which no split of this program's ops reaches: the k - 1
copies are `twin_copies` hinges that lower the range's low end, never the count (TPU seeds 4, 8,
17 and 22: multiply +1,024 / +1,536 out of the range before)."""

from __future__ import annotations

import pytest

import hloparse
from hloflops.accounting import account

SCALE = """
HloModule m, is_scheduled=true

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%loss (p0: f32[4,4], p1: f32[4,4], p2: f32[4,4]) -> (f32[4,4], f32[]) {
  %p0 = f32[4,4] parameter(0)
  %p1 = f32[4,4] parameter(1)
  %p2 = f32[4,4] parameter(2)
  %pred = f32[4,4] PRODUCER(%p0, %p1)PRODUCER_ATTRS, metadata={op_name="jit(f)/jvp(M)/dot_general"}
  %d = f32[4,4] subtract(%pred, %p2), metadata={op_name="jit(f)/jvp(M)/sub"}
  %c = f32[] constant(0.125)
  %bc = f32[4,4] broadcast(%c), dimensions={}
  %g = f32[4,4] multiply(%d, %bc), metadata={op_name="jit(f)/transpose(jvp(M))/mul"}
  %sq = f32[4,4] multiply(%d, %d), metadata={op_name="jit(f)/jvp(M)/square"}
  %z = f32[] constant(0)
  %sum = f32[] reduce(%sq, %z), dimensions={0,1}, to_apply=%add
  ROOT %t = (f32[4,4], f32[]) tuple(%g, %sum)
}

%dw (q0: f32[4,4], q1: f32[4,4]) -> f32[4,4] {
  %q0 = f32[4,4] parameter(0)
  %q1 = f32[4,4] parameter(1)
  ROOT %w = f32[4,4] dot(%q0, %q1), lhs_contracting_dims={0}, rhs_contracting_dims={0}, metadata={op_name="BWD"}
}

%dx (r0: f32[4,4], r1: f32[4,4]) -> f32[4,4] {
  %r0 = f32[4,4] parameter(0)
  %r1 = f32[4,4] parameter(1)
  ROOT %x = f32[4,4] dot(%r0, %r1), lhs_contracting_dims={1}, rhs_contracting_dims={1}, metadata={op_name="BWD"}
}

ENTRY %main (x: f32[4,4], w: f32[4,4], y: f32[4,4], v: f32[4,4]) -> (f32[], f32[4,4], f32[4,4], f32[4], f32[4,4]) {
  %x = f32[4,4] parameter(0)
  %w = f32[4,4] parameter(1)
  %y = f32[4,4] parameter(2)
  %v = f32[4,4] parameter(3)
  %r = f32[4,4] dot(%x, %v), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="REM"}
  %lf = (f32[4,4], f32[]) fusion(%x, %w, %y), kind=kOutput, calls=%loss
  %loss_sum = f32[] get-tuple-element(%lf), index=1
  %grad = f32[4,4] get-tuple-element(%lf), index=0
  %gw = f32[4,4] fusion(%x, %grad), kind=kOutput, calls=%dw
  %gx = f32[4,4] fusion(%grad, %w), kind=kOutput, calls=%dx
  %z = f32[] constant(0)
  %gb = f32[4] reduce(%grad, %z), dimensions={0}, to_apply=%add
  ROOT %out = (f32[], f32[4,4], f32[4,4], f32[4], f32[4,4]) tuple(%loss_sum, %gw, %gx, %gb, %r)
}
""".replace("BWD", "jit(f)/transpose(jvp(M))/dot_general").replace(
    "REM", "jit(f)/transpose(jvp(M))/checkpoint/rematted_computation/b/dot_general")
MATMUL = SCALE.replace("PRODUCER_ATTRS", ", lhs_contracting_dims={1}, rhs_contracting_dims={0}") \
    .replace("PRODUCER", "dot")
LOOP = SCALE.replace("PRODUCER_ATTRS", "").replace("PRODUCER", "add").replace("kind=kOutput, calls=%loss",
                                                                              "kind=kLoop, calls=%loss")


def _scale_hinges(text: str):
    acc = account(hloparse.parse(text), xla={"flops": 0.0})
    return acc, [h for h in acc.remat_hinges if h.twin_copies]


def test_a_stored_loss_gradient_scale_read_by_k_fusions_lowers_the_range_by_k_minus_1_copies():
    acc, hinges = _scale_hinges(MATMUL)
    # the scale (16 multiplies) read by the dW and dX matmul fusions and the bias gradient's reduce
    assert [(h.name, h.opcode, h.flops, h.twin_copies, h.counted) for h in hinges] == [("g", "multiply", 32, 2, False)]
    low, high = acc.remat_flops_bounds
    assert low == acc.remat_flops - sum(h.flops for h in acc.remat_hinges if h.counted or h.twin_copies)
    assert low <= acc.remat_flops - 32 and high >= acc.remat_flops  # the count itself does not move


def test_a_loop_fusion_storing_the_scale_stores_it_in_the_program_without_remat_too():
    # no matmul fused with it: the program without remat outputs the scaled value as well (TPU 41, 42)
    assert _scale_hinges(LOOP)[1] == []


def test_a_scale_with_one_reader_has_no_copies_to_make():
    one = MATMUL.replace("%gx = f32[4,4] fusion(%grad, %w)", "%gx = f32[4,4] fusion(%x, %w)") \
        .replace("%gb = f32[4] reduce(%grad, %z)", "%gb = f32[4] reduce(%x, %z)")
    assert _scale_hinges(one)[1] == []


CASES = [4, 8, 22]  # TPU draws out of range before: multiply +1,024, +1,536, +1,024


@pytest.mark.parametrize("seed", CASES)
def test_drawn_tpu_loss_gradient_scale_copies_put_the_truth_inside_the_range(seed, monkeypatch):
    pytest.importorskip("libtpu", reason="libtpu is not installed: no TPU compiler to build the programs with")
    from tests.remat.test_remat_tpu_generated import _checked
    outcome = _checked(seed, monkeypatch)
    verdict = next(v for v in outcome.verdicts if v.stage == "after")
    assert verdict.truth.get("multiply", 0) < 0, verdict.describe()  # not attainable
    assert verdict.in_bounds, verdict.describe()
    assert outcome.matmul_ok("after"), outcome.describe()
