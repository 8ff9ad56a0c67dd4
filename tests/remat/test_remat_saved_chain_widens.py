"""Float normalization's unnamed bf16 -> f32 widens in a scan's backward loop recompute fusions on
TPU leave the sure count for the range (analysis/hloflops/remat/saved_chain_widens.py): the
program without remat copies such widens into the forward loop fusions that stack the residual
chains, so how many of the recompute's run because of remat rests on its fusion (held-out TPU 82:
convert +15,728,640 counted sure, the range's low end 325,580,800 above the truth 318,758,912;
310,900,736 after)."""

from __future__ import annotations

import hloparse
from hloflops.remat.saved_chain_widens import recompute_widens_hinge
from hloflops.remat.sites import SiteOp

_T = "{1,0:T(8,128)}"
HLO = """HloModule widens, is_scheduled=true, entry_computation_layout={(bf16[8,128]@T)->f32[8,128]@T}

recompute {
  x = bf16[8,128]@T parameter(0)
  w = f32[8,128]@T convert(x)
  n = f32[8,128]@T convert(x), metadata={op_name="@NAME/convert_element_type"}
  ROOT m = f32[8,128]@T multiply(w, n), metadata={op_name="@NAME/mul"}
}

gradient {
  x = bf16[8,128]@T parameter(0)
  w = f32[8,128]@T convert(x)
  ROOT a = f32[8,128]@T add(w, w), metadata={op_name="jit(loss)/transpose(jvp(Net))/while/body/add"}
}
"""
_RECOMPUTE = "jit(loss)/transpose(jvp(Net))/while/body/checkpoint/rematted_computation"


def _hinged(name: str = _RECOMPUTE, frame: str = "body") -> set[str]:
    module = hloparse.parse(HLO.replace("@T", _T).replace("@NAME", name))
    ops = [SiteOp((comp, inst.name, 0), inst, inst.op_name, "rematted" in inst.op_name,
                  "rematted" in inst.op_name, i, None, None, frame)
           for comp in ("recompute", "gradient") for i, inst in enumerate(module.by_name[comp].instructions)
           if inst.opcode != "parameter"]
    remat = {op.key for op in ops}
    return {f"{key[0]}.{key[1]}" for key in recompute_widens_hinge(module, ops, remat, {"body"})}


def test_an_unnamed_widen_in_a_backward_loop_recompute_fusion_is_hinged():
    # Not the named convert (jax's own), nor a widen in a fusion holding no recompute.
    assert _hinged() == {"recompute.w"}


def test_a_widen_beside_forward_ops_is_left_to_the_other_rules():
    assert _hinged("jit(loss)/jvp(Net)/while/body") == set()


def test_a_widen_outside_a_backward_loop_is_left_to_the_other_rules():
    assert _hinged(frame="main") == set()
