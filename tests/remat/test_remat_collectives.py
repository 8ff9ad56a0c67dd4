"""A sharded recompute's collectives (analysis/hloflops/remat/collectives.py). Under tensor
parallelism a recomputed matmul's partial sums are all-reduced again; XLA's all-reduce combiner
puts the forward's all-reduce into one variadic instruction with a backward one, so the
recompute's single all-reduce matches no value and was left unpaired (TPU draws 2 and 24, a
whole-model checkpoint, tensor parallel: all-reduce -34,816 and -320 after optimization). Here
`ar.r` all-reduces a recompute (`h.r`, the twin of `h`) whose forward all-reduce is element 0 of
`ar`; `both` puts a recompute's all-reduce (`u.r`) with the backward's (`m`): the recompute's half
of its elements runs because of remat (TPU draw 6, FSDP: all-reduce -132,096 after optimization,
when such a collective was left unsure). An all-reduce-scatter fusion of a recompute computes its
slice's offset again too (`ars.r`; draw 6: multiply -1)."""

from __future__ import annotations

import hloparse
from hloflops.accounting import account
from hloflops.remat import find_remat
from tests.remat.judge import by_opcode

HLO = """HloModule sharded_recompute, is_scheduled=true

sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

sum.1 {
  a.1 = f32[] parameter(0)
  b.1 = f32[] parameter(1)
  ROOT s.1 = f32[] add(a.1, b.1)
}

sum.2 {
  a.2 = f32[] parameter(0)
  b.2 = f32[] parameter(1)
  ROOT s.2 = f32[] add(a.2, b.2)
}

ENTRY main {
  x = f32[8,16] parameter(0)
  w = f32[16,8] parameter(1)
  v = f32[8,8] parameter(2)
  g = f32[8,8] parameter(3)
  w2 = f32[16,8] parameter(4)
  h = f32[8,8] dot(x, w), @D, metadata={op_name="@F/Dense_0/dot_general"}
  dg = f32[8,8] multiply(g, v), metadata={op_name="@T/Dense_1/mul"}
  ar = (f32[8,8], f32[8,8]) all-reduce(h, dg), to_apply=sum, metadata={op_name="@F/Dense_0/dot_general"}
  y = f32[8,8] get-tuple-element(ar), index=0
  u = f32[8,8] dot(x, w2), @D, metadata={op_name="@F/Dense_1/dot_general"}
  ar.u = f32[8,8] all-reduce(u), to_apply=sum.2, metadata={op_name="@F/Dense_1/dot_general"}
  t = f32[8,8] tanh(y), metadata={op_name="@F/tanh"}
  h.r = f32[8,8] dot(x, w), @D, metadata={op_name="@R/Dense_0/dot_general"}
  ar.r = f32[8,8] all-reduce(h.r), to_apply=sum.1, metadata={op_name="@R/Dense_0/dot_general"}
  t.r = f32[8,8] tanh(ar.r), metadata={op_name="@R/tanh"}
  m = f32[8,8] multiply(t.r, g), metadata={op_name="@B/mul"}
  u.r = f32[8,8] dot(x, w2), @D, metadata={op_name="@R/Dense_1/dot_general"}
  both = (f32[8,8], f32[8,8]) all-reduce(u.r, m), to_apply=sum.2, metadata={op_name="@B/mul"}
  b0 = f32[8,8] get-tuple-element(both), index=0
  b1 = f32[8,8] get-tuple-element(both), index=1
  ROOT out = (f32[8,8], f32[8,8], f32[8,8], (f32[8,8], f32[8,8]), f32[8,8]) tuple(t, b0, b1, ar, ar.u)
}
"""

# CSE merged the recompute's matmul into the forward's, and the one left is the forward's `h`:
# the remat-named all-reduce of it reduces the forward's own value, and nothing runs twice.
MERGED = """HloModule merged, is_scheduled=true

sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  x = f32[8,16] parameter(0)
  w = f32[16,8] parameter(1)
  h = f32[8,8] dot(x, w), @D, metadata={op_name="@F/Dense_0/dot_general"}
  ar.r = f32[8,8] all-reduce(h), to_apply=sum, metadata={op_name="@R/Dense_0/dot_general"}
  ROOT t = f32[8,8] tanh(ar.r), metadata={op_name="@R/tanh"}
}
"""


def _parsed(text: str):
    """The module, its op_name prefixes written out: @F the forward, @R the checkpoint's recompute,
    @B its backward, @T the forward's transpose; @D a matmul's dimension numbers."""
    for short, long in (("@R", "jit(loss)/transpose(jvp(jvp()))/checkpoint/rematted_computation/Block"),
                        ("@B", "jit(loss)/transpose(jvp(jvp()))/checkpoint/Block"),
                        ("@T", "jit(loss)/transpose(jvp(Block))"), ("@F", "jit(loss)/jvp(Block)"),
                        ("@D", "lhs_contracting_dims={1}, rhs_contracting_dims={0}")):
        text = text.replace(short, long)
    return hloparse.parse(text)


def test_the_all_reduce_of_a_recompute_is_recompute_where_the_forwards_is_combined():
    module = _parsed(HLO)
    index = find_remat(module)
    assert ("main", "h.r") in index and ("main", "u.r") in index
    assert ("main", "ar.r") in index
    assert ("main", "ar.r") not in index.weak  # as sure as the matmul it completes
    # The forward's own all-reduces (one combined with the backward's) are model FLOPs.
    assert ("main", "ar") not in index and ("main", "ar.u") not in index
    acc = account(module, xla={"flops": 0.0})
    # h.r, u.r; ar.r and the recompute's half of `both`
    assert by_opcode(acc, remat=True) == {"dot": 2 * (2 * 8 * 8 * 16), "all-reduce": 8 * 8 + 8 * 8}


def test_a_combined_all_reduce_partly_of_a_recompute_is_remat_for_the_recomputes_elements():
    module = _parsed(HLO)
    index = find_remat(module)
    assert ("main", "both") in index and index.partial[("main", "both")] == (64, 128)
    assert ("main", "both") not in index.weak  # as sure as the matmul whose sums it reduces
    acc = account(module, xla={"flops": 0.0})
    row = next(r for r in acc.rows if r.name == "both")
    assert row.total.flops == 2 * 8 * 8 and row.remat_flops == 8 * 8
    assert acc.remat_flops_bounds == (acc.remat_flops, acc.remat_flops)


SCATTER = """HloModule scattered, is_scheduled=true

sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ars {
  in = f32[8,8] parameter(0)
  r = f32[8,8] all-reduce(in), replica_groups={{0,1}}, to_apply=sum
  zero = u32[] constant(0)
  id = u32[] partition-id()
  four = u32[] constant(4)
  off = u32[] multiply(id, four)
  ROOT part = f32[8,4] dynamic-slice(r, zero, off), dynamic_slice_sizes={8,4}
}

ars.r {
  in.r = f32[8,8] parameter(0)
  r.r = f32[8,8] all-reduce(in.r), replica_groups={{0,1}}, to_apply=sum
  zero.r = u32[] constant(0)
  id.r = u32[] partition-id()
  four.r = u32[] constant(4)
  off.r = u32[] multiply(id.r, four.r)
  ROOT part.r = f32[8,4] dynamic-slice(r.r, zero.r, off.r), dynamic_slice_sizes={8,4}
}

ENTRY main {
  x = f32[8,16] parameter(0)
  w = f32[16,8] parameter(1)
  h = f32[8,8] dot(x, w), @D, metadata={op_name="@F/Dense_0/dot_general"}
  y = f32[8,4] fusion(h), kind=kCustom, calls=ars, metadata={op_name="@F/Dense_0/dot_general"}
  t = f32[8,4] tanh(y), metadata={op_name="@F/tanh"}
  h.r = f32[8,8] dot(x, w), @D, metadata={op_name="@R/Dense_0/dot_general"}
  y.r = f32[8,4] fusion(h.r), kind=kCustom, calls=ars.r, metadata={op_name="@R/Dense_0/dot_general"}
  t.r = f32[8,4] tanh(y.r), metadata={op_name="@R/tanh"}
  ROOT out = (f32[8,4], f32[8,4]) tuple(t, t.r)
}
"""


def test_an_all_reduce_scatter_fusion_of_a_recompute_computes_its_offset_again():
    module = _parsed(SCATTER)
    index = find_remat(module)
    assert ("ars.r", "r.r") in index and ("ars.r", "off.r") in index
    assert ("ars", "r") not in index and ("ars", "off") not in index


def test_a_remat_named_all_reduce_of_the_forwards_own_value_is_not_recompute():
    index = find_remat(_parsed(MERGED))
    assert ("main", "ar.r") not in index
