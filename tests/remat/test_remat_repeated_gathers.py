"""An FSDP weight gathered again for a recompute (analysis/hloflops/remat/collectives.py). TPU
gathers a small weight's shards with an all-reduce of each shard written into zeros at the
device's offset. jax's checkpoint reads its weights through the barrier on the recompute's
inputs, so the recompute's gather is another all-reduce of the same shard, which XLA's combiner
puts with the backward's own gathers; the program without remat gathers the weight once (TPU draw
55, FSDP: all-reduce -1,536 after optimization). Here `ar` is the forward's gather of the bias
shard `b`; `ar.r` gathers `b` again for the recompute's bias add `y.r`, combined with the
backward's first gather of `c`: `b`'s elements of it are remat, `c`'s are not. `ar.b` gathers `b`
again too, but only the backward reads it: no recompute's gather."""

from __future__ import annotations

import hloparse
from hloflops.accounting import account
from hloflops.remat import find_remat
from tests.remat.judge import by_opcode

HLO = """HloModule regathered, is_scheduled=true

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
  b = f32[2] parameter(2)
  c = f32[2] parameter(3)
  g = f32[8,8] parameter(4)
  id = u32[] partition-id()
  two = u32[] constant(2)
  off = u32[] multiply(id, two)
  zero = f32[] constant(0)
  zeros = f32[8] broadcast(zero), dimensions={}
  dus = f32[8] dynamic-update-slice(zeros, b, off)
  ar = f32[8] all-reduce(dus), to_apply=sum
  h = f32[8,8] dot(x, w), @D, metadata={op_name="@F/Dense_0/dot_general"}
  bb = f32[8,8] broadcast(ar), dimensions={1}, metadata={op_name="@F/Dense_0/add"}
  y = f32[8,8] add(h, bb), metadata={op_name="@F/Dense_0/add"}
  t = f32[8,8] tanh(y), metadata={op_name="@F/tanh"}
  zeros.r = f32[8] broadcast(zero), dimensions={}
  dus.r = f32[8] dynamic-update-slice(zeros.r, b, off)
  zeros.c = f32[8] broadcast(zero), dimensions={}
  dus.c = f32[8] dynamic-update-slice(zeros.c, c, off)
  ar.r = (f32[8], f32[8]) all-reduce(dus.r, dus.c), to_apply=sum.1
  gb = f32[8] get-tuple-element(ar.r), index=0
  gc = f32[8] get-tuple-element(ar.r), index=1
  h.r = f32[8,8] dot(x, w), @D, metadata={op_name="@R/Dense_0/dot_general"}
  bb.r = f32[8,8] broadcast(gb), dimensions={1}, metadata={op_name="@R/Dense_0/add"}
  y.r = f32[8,8] add(h.r, bb.r), metadata={op_name="@R/Dense_0/add"}
  t.r = f32[8,8] tanh(y.r), metadata={op_name="@R/tanh"}
  cc = f32[8,8] broadcast(gc), dimensions={1}, metadata={op_name="@B/mul"}
  m = f32[8,8] multiply(t.r, g), metadata={op_name="@B/mul"}
  mc = f32[8,8] multiply(m, cc), metadata={op_name="@B/mul"}
  zeros.b = f32[8] broadcast(zero), dimensions={}
  dus.b = f32[8] dynamic-update-slice(zeros.b, b, off)
  ar.b = f32[8] all-reduce(dus.b), to_apply=sum.2
  gbb = f32[8,8] broadcast(ar.b), dimensions={1}, metadata={op_name="@B/mul"}
  mb = f32[8,8] multiply(mc, gbb), metadata={op_name="@B/mul"}
  ROOT out = (f32[8,8], f32[8,8]) tuple(t, mb)
}
"""


def _parsed(text: str):
    """The module, its op_name prefixes written out: @F the forward, @R the checkpoint's recompute,
    @B its backward; @D a matmul's dimension numbers."""
    for short, long in (("@R", "jit(loss)/transpose(jvp(jvp()))/checkpoint/rematted_computation/Block"),
                        ("@B", "jit(loss)/transpose(jvp(jvp()))/checkpoint/Block"),
                        ("@F", "jit(loss)/jvp(Block)"),
                        ("@D", "lhs_contracting_dims={1}, rhs_contracting_dims={0}")):
        text = text.replace(short, long)
    return hloparse.parse(text)


def test_a_weight_gathered_again_for_a_recompute_is_remat_for_its_elements():
    module = _parsed(HLO)
    index = find_remat(module)
    assert ("main", "y.r") in index  # the recompute reading the gathered bias
    assert ("main", "ar.r") in index and index.partial[("main", "ar.r")] == (8, 16)
    assert ("main", "ar.r") not in index.weak
    acc = account(module, xla={"flops": 0.0})
    assert by_opcode(acc, remat=True)["all-reduce"] == 8


def test_the_forwards_gather_and_a_gather_only_the_backward_reads_are_not_remat():
    index = find_remat(_parsed(HLO))
    assert ("main", "ar") not in index
    assert ("main", "ar.b") not in index
