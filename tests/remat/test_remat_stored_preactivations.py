"""A recomputed pre-activation stored narrowed and widened back (analysis/hloflops/remat/stored_preactivations.py).

Held-out TPU draw 60 (a conv net, offload policy): the recompute's convolution fusion hands out
`z = conv + b` narrowed to bf16, and the weight gradient's fusion nests a loop fusion widening it
back for relu. The program without remat makes that round trip in its forward (and widens once
more for its own relu), so the pairing's sure count of both converts (+98,304 convert FLOPs, out of
range) becomes unsure, with one more widen hinged on the widen: the range reaches the truth."""

from __future__ import annotations

import hloparse
from hloflops.remat.sites import SiteOp
from hloflops.remat.stored_preactivations import stored_preactivation_trips

# A TPU module (tiled layouts, TPU's backend config), scheduled: after optimization.
MODULE = """HloModule stored_preactivation, is_scheduled=true, entry_computation_layout=@L

recompute_conv {
  p0 = f32[2,8,8,4] parameter(0)
  p1 = f32[3,3,4,8] parameter(1)
  p2 = f32[8] parameter(2)
  c = f32[2,8,8,8] convolution(p0, p1), @W, dim_labels=b01f_01io->b01f, metadata={op_name="@R/Conv_0/conv"}, @T
  b = f32[2,8,8,8] broadcast(p2), dimensions={3}
  z = f32[2,8,8,8] add(c, b), metadata={op_name="@R/Conv_0/add"}
  zero = f32[] constant(0)
  zb = f32[2,8,8,8] broadcast(zero), dimensions={}
  gt = pred[2,8,8,8] compare(z, zb), direction=GT, metadata={op_name="@R/gt"}
  n = bf16[2,8,8,8] convert(@NARROWED)
  ROOT out = (pred[2,8,8,8], bf16[2,8,8,8]) tuple(gt, n)
}

relu_back {
  q0 = bf16[2,8,8,8] parameter(0)
  w = f32[2,8,8,8] convert(q0)
  zero = f32[] constant(0)
  zb = f32[2,8,8,8] broadcast(zero), dimensions={}
  r = f32[2,8,8,8] maximum(w, zb), metadata={op_name="@R/jit(relu)/max"}
  ROOT rn = bf16[2,8,8,8] convert(r)
}

weight_grad {
  s0 = bf16[2,8,8,8] parameter(0)
  s1 = bf16[2,8,8,8] parameter(1)
  a = bf16[2,8,8,8] fusion(s0), kind=kLoop, calls=relu_back
  ROOT dw = f32[3,3,8,8] convolution(a, s1), @W, dim_labels=f01b_i01o->01bf, metadata={op_name="@B/Conv_1/conv"}
}

ENTRY main {
  x = f32[2,8,8,4] parameter(0)
  k = f32[3,3,4,8] parameter(1)
  bias = f32[8] parameter(2)
  dy = bf16[2,8,8,8] parameter(3)
  f = (pred[2,8,8,8], bf16[2,8,8,8]) fusion(x, k, bias), kind=kOutput, calls=recompute_conv
  mask = pred[2,8,8,8] get-tuple-element(f), index=0
  zn = bf16[2,8,8,8] get-tuple-element(f), index=1
  dw = f32[3,3,8,8] fusion(zn, dy), kind=kOutput, calls=weight_grad
  ROOT out = (pred[2,8,8,8], f32[3,3,8,8]) tuple(mask, dw)
}
"""

_R = "jit(loss)/transpose(jvp(ConvNet))/checkpoint/rematted_computation/block_0"
_B = "jit(loss)/transpose(jvp(ConvNet))/block_0"


def _module(narrowed: str = "z") -> hloparse.ir.Module:
    text = MODULE
    for short, long in (("@NARROWED", narrowed), ("@R", _R), ("@B", _B), ("@W", "window={size=3x3 pad=1_1x1_1}"),
                        ("@T", 'backend_config={"scoped_memory_configs":[]}'),
                        ("@L", "{(f32[2,8,8,4]{3,2,1,0:T(8,128)})->f32[3,3,4,8]{3,2,1,0:T(8,128)}}")):
        text = text.replace(short, long)
    return hloparse.parse(text)


def _ops(module) -> list[SiteOp]:
    """Every instruction of the fused computations as a site op, remat-named as its op_name says."""
    ops = []
    for order, (comp, inst) in enumerate(module.instructions()):
        named = "rematted_computation" in inst.op_name
        ops.append(SiteOp((comp.name, inst.name, 0), inst, inst.op_name, named, named, order, order, order, "main"))
    return ops


def test_the_stored_narrow_and_its_widen_in_the_weight_gradient_are_found():
    module = _module()
    ops = _ops(module)
    trips = stored_preactivation_trips(module, ops, {op.key for op in ops})
    assert trips == {("recompute_conv", "n", 0): ("relu_back", "w", 0)}


def test_converts_the_pairing_did_not_count_are_left_alone():
    module = _module()
    ops = _ops(module)
    assert stored_preactivation_trips(module, ops, {op.key for op in ops if op.inst.opcode != "convert"}) == {}


def test_a_narrow_of_the_bare_convolution_is_not_a_stored_preactivation():
    module = _module("c")  # not the bias add: the matmul's own output
    ops = _ops(module)
    assert stored_preactivation_trips(module, ops, {op.key for op in ops}) == {}
