"""A cotangent the recompute's matmul fusion stores narrowed (analysis/hloflops/remat/
stored_cotangents.py). A checkpoint around the whole model recomputes the head's matmul in the
backward, where TPU fuses it with the loss's cotangent `g = y * c`, the bias gradient's reduce and
`g`'s bf16 narrowing for the two gradient matmuls. The program without remat computes `g` in its
forward's head fusion for the reduce, hands out the head's output wide, and copies `g`'s multiply
into each gradient matmul's fusion, narrowing nothing (TPU draws 2 and 24: convert -8,192 and -512,
multiply +16,384 and +1,024 after optimization). So the narrow is remat, and the two copies of `g`
that program makes beyond this one's offset counted recomputes of the multiply (here the block's
`a.r`, a recompute of twice `g`'s size)."""

from __future__ import annotations

import hloparse
from hloflops.accounting import account
from hloflops.remat import find_remat
from tests.remat.judge import by_opcode

HLO = """HloModule whole_model_checkpoint, is_scheduled=true, entry_computation_layout=@L

sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

block {
  k0 = f32[8,8] parameter(0)
  ROOT a = f32[8,8] multiply(k0, k0), metadata={op_name="@F/block/mul"}
}

block.r {
  j0 = f32[8,8] parameter(0)
  ROOT a.r = f32[8,8] multiply(j0, j0), metadata={op_name="@R/block/mul"}
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

dw {
  u0 = f32[8,16] parameter(0)
  u1 = bf16[8,4] parameter(1)
  uw = f32[8,4] convert(u1)
  ROOT gw = f32[16,4] dot(u0, uw), @G0, metadata={op_name="@B/Dense_0/dot_general"}
}

dx {
  v0 = f32[16,4] parameter(0)
  v1 = bf16[8,4] parameter(1)
  vw = f32[8,4] convert(v1)
  ROOT gx = f32[8,16] dot(vw, v0), @G1, metadata={op_name="@B/Dense_0/dot_general"}
}

ENTRY main {
  x = f32[8,16] parameter(0)
  w = f32[16,4] parameter(1)
  b = f32[4] parameter(2)
  c = f32[] parameter(3)
  e = f32[8,8] parameter(4)
  fa = f32[8,8] fusion(e), kind=kLoop, calls=block, @T
  l = f32[] fusion(x, w, b), kind=kOutput, calls=fwd, metadata={op_name="@F/Dense_0/dot_general"}
  fa.r = f32[8,8] fusion(e), kind=kLoop, calls=block.r
  gr = (f32[4], bf16[8,4]) fusion(x, w, b, c), kind=kOutput, calls=grad, metadata={op_name="@R/Dense_0/dot_general"}
  gc.1 = bf16[8,4] get-tuple-element(gr), index=1
  fw = f32[16,4] fusion(x, gc.1), kind=kOutput, calls=dw
  fx = f32[8,16] fusion(w, gc.1), kind=kOutput, calls=dx
  ROOT out = (f32[], (f32[4], bf16[8,4]), f32[16,4], f32[8,16], f32[8,8], f32[8,8]) tuple(l, gr, fw, fx, fa, fa.r)
}
"""


def _parsed(text: str):
    """@F the forward, @R the checkpoint's recompute, @B its backward; @D a matmul's dimensions
    (@G0, @G1 the gradients'); @L the entry's layout and @T TPU's backend config (what makes it a TPU module)."""
    for short, long in (("@D", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
                        ("@G0", "lhs_contracting_dims={0}, rhs_contracting_dims={0}"),
                        ("@G1", "lhs_contracting_dims={1}, rhs_contracting_dims={1}"),
                        ("@L", "{(f32[8,16]{1,0:T(8,128)})->f32[]{:T(128)}}"),
                        ("@T", 'backend_config={"scoped_memory_configs":[]}'),
                        ("@R", "jit(loss)/transpose(jvp(jvp()))/checkpoint/rematted_computation/LM"),
                        ("@B", "jit(loss)/transpose(jvp(jvp()))/checkpoint"), ("@F", "jit(loss)/jvp(LM)")):
        text = text.replace(short, long)
    return hloparse.parse(text)


def test_a_cotangent_the_recomputes_matmul_fusion_stores_narrowed_is_copied_by_the_twin():
    module = _parsed(HLO)
    index = find_remat(module)
    assert ("grad", "d.r") in index and ("grad", "y.r") in index
    assert ("grad", "gc") in index and ("grad", "g") not in index
    # The program without remat's two extra copies of `g` (8 x 4 each) offset the block's recompute.
    assert ("block.r", "a.r") not in index
    acc = account(module, xla={"flops": 0.0})
    assert by_opcode(acc, remat=True) == {"dot": 2 * 8 * 4 * 16, "add": 8 * 4, "convert": 8 * 4}


def test_a_narrowed_cotangent_read_by_a_matmul_outside_the_recompute_only_is_kept():
    # One reader is no matmul: XLA need not copy `g` into it, the rule says nothing.
    reader = "fx = f32[8,16] fusion(w, gc.1), kind=kOutput, calls=dx"
    text = HLO.replace(reader, reader + "\n  gcw = f32[8,4] convert(gc.1)")
    module = _parsed(text)
    index = find_remat(module)
    assert ("grad", "gc") not in index and ("block.r", "a.r") in index
