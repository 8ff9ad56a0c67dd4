"""hloflops.remat.stored_twin_copies' `stacked_residual_round_trips`: a recomputed residual whose
float-normalization narrowing carries the name of the call enclosing it.

Where the checkpointed function calls a jitted or scanned body (`nn.remat(nn.scan(...))`, a nested
`closed_call`), XLA's float normalization narrows a call's bfloat16 result with the call's own
metadata (`.../rematted_computation/while/body/closed_call`, a prefix of the op it narrows), not
unnamed as elsewhere. Such a narrowing is float normalization's all the same: the program without
remat stores the residual in a bfloat16 stack (2 * trips + 2 slice-sized converts per trip
surely, taken off the remat FLOPs of convert, and 2 more, the twin's forward narrowing and fused
widen, sure too where the narrowing here is not counted as remat: held-out base 235,
linen_remat_scan of gelu MLPs, six such residuals, the convert truth below the low end before).
A cast jax named (`convert_element_type`) stays the recompute's own, counted only where it
narrows a loop input."""

from __future__ import annotations

import hloparse
from hloflops.accounting import account

LOOP = "jit(loss)/transpose(jvp(M))/while"
CALL = LOOP + "/body/closed_call/checkpoint/rematted_computation/while/body/closed_call"
TUPLE = "(s32[], f32[2,32], f32[32,128], f32[2,128])"  # the loop's state: counter, input, kernel, cotangent
TRIPS = 'backend_config={"known_trip_count":{"n":"2"}}'
GRAD = LOOP + "/body/closed_call/checkpoint/while/body/closed_call"  # the gradient ops' scope

# A backward loop (two trips) recomputing tanh of a matmul, narrowing it to bfloat16 under the
# call's name, and handing it to a gradient multiply (named outside the recompute scope).
STACKED = """HloModule stacked, is_scheduled=true

%tanh_fusion (p.0: f32[2,128]) -> bf16[2,128] {
  %p.0 = f32[2,128] parameter(0)
  %tanh.1 = f32[2,128] tanh(%p.0), metadata={op_name="@CALL/mlp/tanh"}
  ROOT %convert.1 = bf16[2,128] convert(%tanh.1), metadata={op_name="@CALL"}
}

%grad_fusion (p.1: bf16[2,128], p.2: f32[2,128]) -> f32[2,128] {
  %p.1 = bf16[2,128] parameter(0)
  %convert.2 = f32[2,128] convert(%p.1)
  %p.2 = f32[2,128] parameter(1)
  ROOT %mul.1 = f32[2,128] multiply(%convert.2, %p.2), metadata={op_name="@GRAD/mlp/mul"}
}

%body (arg.1: @T) -> @T {
  %arg.1 = @T parameter(0)
  %i.1 = s32[] get-tuple-element(%arg.1), index=0
  %x.1 = f32[2,32] get-tuple-element(%arg.1), index=1
  %w.1 = f32[32,128] get-tuple-element(%arg.1), index=2
  %g.1 = f32[2,128] get-tuple-element(%arg.1), index=3
  %mm.1 = f32[2,128] dot(%x.1, %w.1), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="@CALL/dot"}
  %tanh_fusion.1 = bf16[2,128] fusion(%mm.1), kind=kLoop, calls=%tanh_fusion
  %grad_fusion.1 = f32[2,128] fusion(%tanh_fusion.1, %g.1), kind=kLoop, calls=%grad_fusion
  %one.1 = s32[] constant(1)
  %next.1 = s32[] add(%i.1, %one.1), metadata={op_name="@LOOP/body/add"}
  ROOT %tuple.1 = @T tuple(%next.1, %x.1, %w.1, %grad_fusion.1)
}

%cond (arg.2: @T) -> pred[] {
  %arg.2 = @T parameter(0)
  %i.2 = s32[] get-tuple-element(%arg.2), index=0
  %n.2 = s32[] constant(2)
  ROOT %lt.2 = pred[] compare(%i.2, %n.2), direction=LT
}

ENTRY %main (x.0: f32[2,32], w.0: f32[32,128], g.0: f32[2,128]) -> f32[2,128] {
  %x.0 = f32[2,32] parameter(0)
  %w.0 = f32[32,128] parameter(1)
  %g.0 = f32[2,128] parameter(2)
  %zero.0 = s32[] constant(0)
  %tuple.0 = @T tuple(%zero.0, %x.0, %w.0, %g.0)
  %while.0 = @T while(%tuple.0), condition=%cond, body=%body, metadata={op_name="@LOOP"}, @TRIPS
  ROOT %out.0 = f32[2,128] get-tuple-element(%while.0), index=3
}
""".replace("@TRIPS", TRIPS).replace("@T", TUPLE).replace("@CALL", CALL).replace("@GRAD", GRAD).replace("@LOOP", LOOP)


def _account(text: str):
    return account(hloparse.parse(text), xla={"flops": 0.0})


def test_a_narrowing_named_for_its_call_is_a_stacked_residual_of_the_twin():
    acc = _account(STACKED)
    # The narrowing is not counted as remat (this forward narrows no such value): the twin's forward
    # narrowing and fused widen of the residual (2 more per trip) are sure too, no hinge is left.
    assert not [h for h in acc.remat_hinges if h.twin_copies]
    assert [(t.name, t.executions, t.flops) for t in acc.remat_twin_stores] == [("convert.1", 8 * 2, 8 * 512)]
    assert acc.remat_flops == -8 * 512
    assert acc.remat_flops_bounds[0] == -8 * 512


def test_a_cast_jax_named_of_a_recomputed_value_is_no_stacked_residual():
    text = STACKED.replace(f'op_name="{CALL}"}}', f'op_name="{CALL}/mlp/convert_element_type"}}', 1)
    assert text != STACKED
    acc = _account(text)
    assert not [h for h in acc.remat_hinges if h.twin_copies] and not acc.remat_twin_stores
    assert acc.remat_flops_bounds[0] == 0 == acc.remat_flops


def test_the_twins_stack_stores_are_said_in_the_json_the_summary_and_the_folded_stacks():
    import json

    from hloflops.report.folded import folded_stacks
    from hloflops.report.report import Report

    report = Report(_account(STACKED))
    assert report.remat_flops == -8 * 512
    assert json.loads(report.to_json())["remat_twin_stores"] == [
        {"name": "convert.1", "computation": "tanh_fusion", "opcode": "convert", "executions": 16, "flops": 4096}]
    assert "the program without remat would also run 16 converts storing bf16 residuals (4,096 flops, taken off " \
           "remat flops)" in report.summary()
    # no negative remat stack: the narrowing's own FLOPs (and the gradient's widen) show as model FLOPs
    convert = [line for line in folded_stacks(report).splitlines() if ";convert" in line]
    assert convert and all("[remat]" not in line for line in convert), convert
    assert sum(int(line.rsplit(" ", 1)[1]) for line in convert) == 2 * 512
