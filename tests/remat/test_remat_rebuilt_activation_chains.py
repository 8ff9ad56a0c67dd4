"""A recomputed activation chain whose forward TPU runs only inside its matmul's output fusion is
left to the range (analysis/hloflops/remat/rebuilt_activation_chains.py).

TPU draws 231 and 239 (tensor parallel, gelu): the program without remat saves the matmul's output
from that fusion and rebuilds gelu's chain from it in each backward fusion, as many copies as the
recompute makes; the pairing by value counted the forward's count of them as sure recompute
(231: multiply +393,728, add +163,840; 239: multiply +32,768, add +16,384), and both draws were out
of range. Only where the recompute hands its matmul's output to the fusions rebuilding the chain,
as the program without remat would its forward's. A value the forward hands out of its fusion is
stored by both programs: counted sure."""

from __future__ import annotations

import hloparse
from hloflops.remat.rebuilt_activation_chains import rebuilt_activation_chains
from hloflops.remat.sites import SiteOp

HLO = """HloModule chains, is_scheduled=true

forward_fusion {
  x = f32[8,8] parameter(0)
  w = f32[8,8] parameter(1)
  h = f32[8,8] convolution(x, w), dim_labels=bf_io->bf, metadata={op_name="jit(loss)/jvp()/dot_general"}
  c = f32[8,8] multiply(h, h), metadata={op_name="jit(loss)/jvp()/integer_pow"}
  n = bf16[8,8] convert(c)
  ROOT @ROOT
}

recompute_fusion {
  p = f32[8,8] parameter(0)
  ROOT r = f32[8,8] multiply(p, p), metadata={op_name="@RECOMPUTE"}
}

ENTRY main {
  a = f32[8,8] parameter(0)
  b = f32[8,8] parameter(1)
  f = @SHAPE fusion(a, b), kind=kOutput, calls=forward_fusion
  k = f32[8,8] convolution(a, b), dim_labels=bf_io->bf, metadata={op_name="@MATMUL"}
  ROOT g = f32[8,8] fusion(k), kind=kLoop, calls=recompute_fusion
}
"""


RECOMPUTE = "jit(loss)/transpose(jvp())/checkpoint/rematted_computation/integer_pow"


def _left_to_the_range(hands_out_the_chain: bool) -> set[str]:
    root, shape = ("t = (bf16[8,8], f32[8,8]) tuple(n, c)", "(bf16[8,8], f32[8,8])") if hands_out_the_chain \
        else ("o = bf16[8,8] copy(n)", "bf16[8,8]")
    module = hloparse.parse(HLO.replace("@ROOT", root).replace("@SHAPE", shape).replace("@RECOMPUTE", RECOMPUTE)
                            .replace("@MATMUL", RECOMPUTE.replace("integer_pow", "dot_general")))
    ops = []
    for comp in (module.by_name["forward_fusion"], module.by_name["recompute_fusion"]):
        for inst in comp.instructions:
            marked = "rematted_computation" in inst.op_name
            ops.append(SiteOp((comp.name, inst.name, 0), inst, inst.op_name, marked, marked, len(ops), None, None,
                              "main"))
    recompute = {op.key for op in ops if op.marked}
    return {key[1] for key in rebuilt_activation_chains(module, ops, recompute, recompute)}


def test_a_chain_the_forward_computes_only_inside_its_matmul_fusion_is_left_to_the_range():
    assert _left_to_the_range(hands_out_the_chain=False) == {"r"}


def test_a_chain_value_the_forward_hands_out_stays_sure():
    assert _left_to_the_range(hands_out_the_chain=True) == set()
