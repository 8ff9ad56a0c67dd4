"""A bias add of a saved matmul output, read through one output of a multi-output fusion
(analysis/hloflops/remat/fusion_copies.py, `saved_matmul_epilogues`). TPU's kOutput fusion of the
forward's matmul hands out the policy's rounded residual (`reduce-precision(conv)`, jax's marker)
beside the raw output the forward's activation reads; the recompute's bias add reads that residual
through a `get-tuple-element`. The walk to the saved matmul stopped at the get-tuple-element, so
the recompute's copies of the add (in the input gradient's fusion and nested in the next weight
gradient's) were left to `_same_value`'s cap and a stand-in: ntpu 136 (nnx_loop, tanh, one
device) add 4,096 below the truth and out of range, ntpu 178 and tpu 39 alike. The program
without remat stores the sum `x @ W + b` from its matmul's fusion and runs no add in its backward."""

from __future__ import annotations

import hloparse
from hloflops.remat.fusion_copies import _is_saved_matmul
from hloparse.ir import CallRole

_TEXT = """HloModule m, is_scheduled=true

%mm_fusion (p0: f32[2,4], p1: f32[4,8]) -> (f32[2,8], f32[2,8]) {
  %p0 = f32[2,4]{1,0} parameter(0)
  %p1 = f32[4,8]{1,0} parameter(1)
  %mm = f32[2,8]{1,0} convolution(%p0, %p1), dim_labels=bf_io->bf, metadata={op_name="jit(loss)/jvp()/dot_general"}
  %rp = f32[2,8]{1,0} reduce-precision(%mm), exponent_bits=8, mantissa_bits=23,
    metadata={op_name="jit(loss)/jvp()/reduce_precision"}
  ROOT %t = (f32[2,8], f32[2,8]) tuple(%rp, %mm)
}

%grad_fusion (q0: f32[2,8], q1: f32[8]) -> f32[2,8] {
  %q0 = f32[2,8]{1,0} parameter(0)
  %q1 = f32[8]{0} parameter(1)
  %b = f32[2,8]{1,0} broadcast(%q1), dimensions={1}, metadata={op_name="RC/add"}
  %h = f32[2,8]{1,0} add(%q0, %b), metadata={op_name="RC/add"}
  ROOT %th = f32[2,8]{1,0} tanh(%h), metadata={op_name="RC/tanh"}
}

%grad_fusion_raw (q0: f32[2,8], q1: f32[8]) -> f32[2,8] {
  %q0 = f32[2,8]{1,0} parameter(0)
  %q1 = f32[8]{0} parameter(1)
  %b = f32[2,8]{1,0} broadcast(%q1), dimensions={1}, metadata={op_name="RC/add"}
  %h = f32[2,8]{1,0} add(%q0, %b), metadata={op_name="RC/add"}
  ROOT %th = f32[2,8]{1,0} tanh(%h), metadata={op_name="RC/tanh"}
}

ENTRY %main (x: f32[2,4], w: f32[4,8], bias: f32[8]) -> (f32[2,8], f32[2,8]) {
  %x = f32[2,4]{1,0} parameter(0)
  %w = f32[4,8]{1,0} parameter(1)
  %bias = f32[8]{0} parameter(2)
  %f = (f32[2,8], f32[2,8]) fusion(%x, %w), kind=kOutput, calls=%mm_fusion
  %saved = f32[2,8]{1,0} get-tuple-element(%f), index=0
  %raw = f32[2,8]{1,0} get-tuple-element(%f), index=1
  %g0 = f32[2,8]{1,0} fusion(%saved, %bias), kind=kLoop, calls=%grad_fusion
  %g1 = f32[2,8]{1,0} fusion(%raw, %bias), kind=kLoop, calls=%grad_fusion_raw
  ROOT %out = (f32[2,8], f32[2,8]) tuple(%g0, %g1)
}
"""


def _saved(comp: str) -> bool:
    # RC: the recompute's scope, shortened in the text above
    module = hloparse.parse(_TEXT.replace('"RC/', '"jit(loss)/transpose(jvp())/checkpoint/rematted_computation/'))
    callers = {callee: (caller.name, inst.name) for caller, inst in module.instructions()
               if inst.opcode == "fusion" for callee in inst.called(CallRole.FUSION)}
    return _is_saved_matmul(module, callers, comp, module.by_name[comp].by_name["q0"])


def test_bias_add_of_the_rounded_residual_out_of_a_multi_output_matmul_fusion_is_saved():
    # read through `get-tuple-element(index=0)`: the policy's residual, the matmul's saved output
    assert _saved("grad_fusion")


def test_bias_add_of_the_raw_matmul_output_of_that_fusion_is_not():
    # index 1 is the matmul's unrounded output (the forward activation's): no saved residual
    assert not _saved("grad_fusion_raw")
