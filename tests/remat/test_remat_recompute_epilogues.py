"""The epilogue of a recomputed matmul inside a gradient fusion (analysis/hloflops/remat/
recompute_epilogues.py). A checkpoint around the whole model recomputes the head's matmul and bias
add in the backward, where TPU fuses them with the loss's cotangent and the bias gradient: a fusion
whose outputs are all gradients, so rule 4 took the recomputed bias add for a copy the program
without remat makes in its gradient fusion too (TPU draws 2 and 24, whole-model checkpoints: add
-8,192 and -512 after optimization). That program's forward fuses the bias add into the matmul's
output fusion and stores the sum (or fuses its cotangent there): its gradient fusion copies no bias
add. Here `fwd` computes the head `x @ w + b` and the loss, `grad` recomputes `x @ w + b` (`d.r`,
`y.r`) under the loss's cotangent `g`, its reduce and its bf16 narrowing."""

from __future__ import annotations

import hloparse
from hloflops.accounting import account
from hloflops.remat import find_remat
from tests.remat.judge import by_opcode

HLO = """HloModule whole_model_checkpoint, is_scheduled=true

sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

fwd {
  p0 = f32[8,16] parameter(0)
  p1 = f32[16,4] parameter(1)
  p2 = f32[4] parameter(2)
  d = f32[8,4] dot(p0, p1), @D, metadata={op_name="@F/Dense_0/dot_general"}
  bb = f32[8,4] broadcast(p2), dimensions={1}, metadata={op_name="@F/Dense_0/add"}
  y = f32[8,4] add(d, bb), metadata={op_name="@F/Dense_0/add"}
  sq = f32[8,4] multiply(y, y), metadata={op_name="jit(loss)/jvp()/square"}
  z = f32[] constant(0)
  ROOT l = f32[] reduce(sq, z), dimensions={0,1}, to_apply=sum, metadata={op_name="jit(loss)/jvp()/reduce_sum"}
}

grad {
  q0 = f32[8,16] parameter(0)
  q1 = f32[16,4] parameter(1)
  q2 = f32[4] parameter(2)
  q3 = f32[] parameter(3)
  d.r = f32[8,4] dot(q0, q1), @D, metadata={op_name="@R/Dense_0/dot_general"}
  bb.r = f32[8,4] broadcast(q2), dimensions={1}, metadata={op_name="@R/Dense_0/add"}
  y.r = f32[8,4] add(d.r, bb.r), metadata={op_name="@R/Dense_0/add"}
  s = f32[8,4] broadcast(q3), dimensions={}, metadata={op_name="@B/mul"}
  g = f32[8,4] multiply(y.r, s), metadata={op_name="@B/mul"}
  z.1 = f32[] constant(0)
  gb = f32[4] reduce(g, z.1), dimensions={0}, to_apply=sum, metadata={op_name="@B/Dense_0/reduce_sum"}
  gc = bf16[8,4] convert(g)
  ROOT t = (f32[4], bf16[8,4]) tuple(gb, gc)
}

ENTRY main {
  x = f32[8,16] parameter(0)
  w = f32[16,4] parameter(1)
  b = f32[4] parameter(2)
  c = f32[] parameter(3)
  l = f32[] fusion(x, w, b), kind=kOutput, calls=fwd, metadata={op_name="@F/Dense_0/dot_general"}
  gr = (f32[4], bf16[8,4]) fusion(x, w, b, c), kind=kOutput, calls=grad, metadata={op_name="@R/Dense_0/dot_general"}
  ROOT out = (f32[], (f32[4], bf16[8,4])) tuple(l, gr)
}
"""


def _parsed(text: str):
    """@F the forward, @R the checkpoint's recompute, @B its backward; @D a matmul's dimensions."""
    for short, long in (("@D", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
                        ("@R", "jit(loss)/transpose(jvp(jvp()))/checkpoint/rematted_computation/LM"),
                        ("@B", "jit(loss)/transpose(jvp(jvp()))/checkpoint"), ("@F", "jit(loss)/jvp(LM)")):
        text = text.replace(short, long)
    return hloparse.parse(text)


def test_a_recomputed_bias_add_over_its_recomputed_matmul_in_a_gradient_fusion_is_recompute():
    module = _parsed(HLO)
    index = find_remat(module)
    assert ("grad", "d.r") in index and ("grad", "y.r") in index
    # The backward's own ops reading it are model FLOPs; the forward's are too.
    assert ("grad", "g") not in index and ("fwd", "y") not in index and ("fwd", "d") not in index
    # It rests on how XLA fused the program without remat (its forward's fusion storing the sum):
    # in the range, as every fusion rule's cheap op.
    assert ("grad", "y.r") in index.weak
    acc = account(module, xla={"flops": 0.0})
    assert by_opcode(acc, remat=True) == {"dot": 2 * 8 * 4 * 16, "add": 8 * 4}


SPLIT = HLO.replace("""fwd {
  p0 = f32[8,16] parameter(0)
  p1 = f32[16,4] parameter(1)
  p2 = f32[4] parameter(2)
  d = f32[8,4] dot(p0, p1), @D, metadata={op_name="@F/Dense_0/dot_general"}
""", """fwd.mm {
  m0 = f32[8,16] parameter(0)
  m1 = f32[16,4] parameter(1)
  ROOT d = f32[8,4] dot(m0, m1), @D, metadata={op_name="@F/Dense_0/dot_general"}
}

fwd {
  p0 = f32[8,4] parameter(0)
  p2 = f32[4] parameter(1)
""").replace("  y = f32[8,4] add(d, bb)", "  y = f32[8,4] add(p0, bb)").replace(
    """  l = f32[] fusion(x, w, b), kind=kOutput, calls=fwd,""",
    """  mm = f32[8,4] fusion(x, w), kind=kOutput, calls=fwd.mm, metadata={op_name="@F/Dense_0/dot_general"}
  l = f32[] fusion(mm, b), kind=kLoop, calls=fwd,""")


def test_a_bias_add_the_forward_computes_outside_its_matmuls_fusion_stays_a_copy():
    # The forward stores the bare matmul output and adds the bias in a fusion of its own: the
    # program without remat may copy the add into its gradient fusion as well, rule 4's answer.
    index = find_remat(_parsed(SPLIT))
    assert ("fwd.mm", "d") not in index and ("grad", "d.r") in index
    assert ("grad", "y.r") not in index


# FSDP: the head's partial sums are completed by an all-reduce-scatter fusion, forward and recompute
# alike, and the bias add reads its slice at a parameter of its fusion (TPU draw 6: add -8,192).
SCATTERED = """HloModule whole_model_checkpoint_fsdp, is_scheduled=true

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

fwd {
  p0 = f32[8,4] parameter(0)
  p2 = f32[4] parameter(1)
  bb = f32[8,4] broadcast(p2), dimensions={1}, metadata={op_name="@F/Dense_0/add"}
  y = f32[8,4] add(p0, bb), metadata={op_name="@F/Dense_0/add"}
  sq = f32[8,4] multiply(y, y), metadata={op_name="jit(loss)/jvp()/square"}
  z = f32[] constant(0)
  ROOT l = f32[] reduce(sq, z), dimensions={0,1}, to_apply=sum, metadata={op_name="jit(loss)/jvp()/reduce_sum"}
}

grad {
  q0 = f32[8,4] parameter(0)
  q2 = f32[4] parameter(1)
  q3 = f32[] parameter(2)
  bb.r = f32[8,4] broadcast(q2), dimensions={1}, metadata={op_name="@R/Dense_0/add"}
  y.r = f32[8,4] add(q0, bb.r), metadata={op_name="@R/Dense_0/add"}
  s = f32[8,4] broadcast(q3), dimensions={}, metadata={op_name="@B/mul"}
  g = f32[8,4] multiply(y.r, s), metadata={op_name="@B/mul"}
  z.1 = f32[] constant(0)
  gb = f32[4] reduce(g, z.1), dimensions={0}, to_apply=sum, metadata={op_name="@B/Dense_0/reduce_sum"}
  gc = bf16[8,4] convert(g)
  ROOT t = (f32[4], bf16[8,4]) tuple(gb, gc)
}

ENTRY main {
  x = f32[8,16] parameter(0)
  w = f32[16,8] parameter(1)
  b = f32[4] parameter(2)
  c = f32[] parameter(3)
  h = f32[8,8] dot(x, w), @D, metadata={op_name="@F/Dense_0/dot_general"}
  hs = f32[8,4] fusion(h), kind=kCustom, calls=ars, metadata={op_name="@F/Dense_0/dot_general"}
  l = f32[] fusion(hs, b), kind=kLoop, calls=fwd
  h.r = f32[8,8] dot(x, w), @D, metadata={op_name="@R/Dense_0/dot_general"}
  hs.r = f32[8,4] fusion(h.r), kind=kCustom, calls=ars.r, metadata={op_name="@R/Dense_0/dot_general"}
  gr = (f32[4], bf16[8,4]) fusion(hs.r, b, c), kind=kLoop, calls=grad
  ROOT out = (f32[], (f32[4], bf16[8,4])) tuple(l, gr)
}
"""


def test_a_recomputed_bias_add_after_the_collective_completing_its_matmul_is_recompute():
    index = find_remat(_parsed(SCATTERED))
    assert ("main", "h.r") in index and ("ars.r", "r.r") in index and ("ars.r", "off.r") in index
    assert ("grad", "y.r") in index and ("grad", "g") not in index and ("fwd", "y") not in index
