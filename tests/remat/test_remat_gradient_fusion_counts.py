"""A count by value that fusion_copies dropped in a gradient fusion marks the recompute's sibling
copy as a hinge (analysis/hloflops/remat/gradient_fusion_counts.py). vtpu 263 (whole_model_checkpoint
encdec, tensor parallelism): a layer norm's `x - mean` runs in the forward, the recompute's
normalizing fusion and the layer norm's gradient fusion; the cap by the forward's one copy picked
the gradient fusion's copy, which fusion_copies dropped as the program without remat's own, and the
recompute fusion's copy was left model FLOPs, sure (subtract -1,024 per layer norm). The unit tests
hand the function site ops of a small hand-written module."""

from __future__ import annotations

import hloparse
from hloflops.remat.fusion_copies import fused_outputs
from hloflops.remat.gradient_fusion_counts import counts_passed_to_recompute_siblings
from hloflops.remat.sites import SiteOp

_RECOMPUTE = '"jit(loss)/transpose(jvp(jvp()))/checkpoint/rematted_computation/Model/LayerNorm_1/sub"'
_GRADIENT = '"jit(loss)/transpose(jvp(jvp()))/checkpoint/Model/LayerNorm_1/mul"'

_MODULE = f"""HloModule m, is_scheduled=true

%grad (p0: f32[2,8], p1: f32[2,8], g: f32[2,8]) -> f32[2,8] {{
  %p0 = f32[2,8]{{1,0}} parameter(0)
  %p1 = f32[2,8]{{1,0}} parameter(1)
  %g = f32[2,8]{{1,0}} parameter(2)
  %d = f32[2,8]{{1,0}} subtract(%p0, %p1), metadata={{op_name={_RECOMPUTE}}}
  ROOT %o = f32[2,8]{{1,0}} multiply(%d, %g), metadata={{op_name={_GRADIENT}}}
}}

%rec (p0: f32[2,8], p1: f32[2,8], s: f32[2,8]) -> f32[2,8] {{
  %p0 = f32[2,8]{{1,0}} parameter(0)
  %p1 = f32[2,8]{{1,0}} parameter(1)
  %s = f32[2,8]{{1,0}} parameter(2)
  %d = f32[2,8]{{1,0}} subtract(%p0, %p1), metadata={{op_name={_RECOMPUTE}}}
  ROOT %o = f32[2,8]{{1,0}} multiply(%d, %s), metadata={{op_name={_RECOMPUTE}}}
}}

ENTRY %main (x0: f32[2,8], x1: f32[2,8], x2: f32[2,8]) -> f32[2,8] {{
  %x0 = f32[2,8]{{1,0}} parameter(0)
  %x1 = f32[2,8]{{1,0}} parameter(1)
  %x2 = f32[2,8]{{1,0}} parameter(2)
  %a = f32[2,8]{{1,0}} fusion(%x0, %x1, %x2), kind=kLoop, calls=%grad
  %b = f32[2,8]{{1,0}} fusion(%x0, %x1, %x2), kind=kLoop, calls=%rec
  ROOT %t = f32[2,8]{{1,0}} add(%a, %b)
}}
"""


def _ops(module) -> list[SiteOp]:
    """Site ops of the two fusions' subtracts and roots: both subtracts one value, remat-named."""
    ops, order = [], 0
    for name in ("grad", "rec"):
        comp = module.by_name[name]
        for inst in comp.instructions:
            if inst.opcode in ("subtract", "multiply"):
                value = "d" if inst.opcode == "subtract" else f"o-{name}"
                ops.append(SiteOp((name, inst.name, 0), inst, _RECOMPUTE.strip('"'), True, True, order, value, value,
                                  "main"))
                order += 1
    return ops


def test_dropped_gradient_copy_passes_its_count_to_the_recompute_sibling():
    module = hloparse.parse(_MODULE)
    found = counts_passed_to_recompute_siblings(_ops(module), fused_outputs(module), counted={("grad", "d", 0)},
                                                remat={("rec", "o", 0)}, dropped_copies={("grad", "d", 0)})
    assert found == {("rec", "d", 0)}, found


def test_no_sibling_in_a_recompute_fusion_no_hinge():
    # The other fusion's output is no recompute: nothing takes the count.
    module = hloparse.parse(_MODULE)
    found = counts_passed_to_recompute_siblings(_ops(module), fused_outputs(module), counted={("grad", "d", 0)},
                                                remat=set(), dropped_copies={("grad", "d", 0)})
    assert found == set(), found


def test_a_count_kept_is_not_passed():
    # The counted copy is still remat (fusion_copies kept it): no count to pass on.
    module = hloparse.parse(_MODULE)
    found = counts_passed_to_recompute_siblings(_ops(module), fused_outputs(module), counted={("grad", "d", 0)},
                                                remat={("rec", "o", 0), ("grad", "d", 0)},
                                                dropped_copies={("grad", "d", 0)})
    assert found == set(), found
