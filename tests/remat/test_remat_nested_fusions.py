"""A cheap recompute TPU nests inside a matmul's fusion (analysis/hloflops/remat/fusion_copies.py,
`_nested_in_gradient_matmuls`). TPU fuses a matmul's elementwise producers into the matmul's own
output fusion, as a loop fusion nested inside it: the forward's bias add inside the fusion of the
next layer's matmul, and, with remat, the recompute's bias add inside the fusion of that matmul's
weight gradient. Where the forward never materializes the value, the program without remat has
nothing saved to read there and builds it inside its gradient's fusion the same way: the nested
recompute is model FLOPs (TPU draw 47, a nested remat conv net: maximum +12,288 after
optimization; draw 0, a whole-model checkpoint: multiply +619,136 -> +404,096). Where the forward
materializes it (its own fusion, read by the matmul), the program without remat reads that
value, and the nested copy runs because of remat."""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat

NESTED_FORWARD = """HloModule nested, is_scheduled=true

bias_fwd {
  p0 = f32[8,16] parameter(0)
  p1 = f32[16] parameter(1)
  pb = f32[8,16] broadcast(p1), dimensions={1}
  ROOT a = f32[8,16] add(p0, pb), metadata={op_name="@F/Dense_0/add"}
}

matmul_fwd {
  q0 = f32[8,16] parameter(0)
  q1 = f32[16] parameter(1)
  q2 = f32[16,8] parameter(2)
  f = f32[8,16] fusion(q0, q1), kind=kLoop, calls=bias_fwd
  ROOT d = f32[8,8] dot(f, q2), @D, metadata={op_name="@F/Dense_1/dot_general"}
}

bias_bwd {
  r0 = f32[8,16] parameter(0)
  r1 = f32[16] parameter(1)
  rb = f32[8,16] broadcast(r1), dimensions={1}
  ROOT ra = f32[8,16] add(r0, rb), metadata={op_name="@R/Dense_0/add"}
}

matmul_grad {
  s0 = f32[8,16] parameter(0)
  s1 = f32[16] parameter(1)
  s2 = f32[8,8] parameter(2)
  g = f32[8,16] fusion(s0, s1), kind=kLoop, calls=bias_bwd
  ROOT dw = f32[16,8] dot(g, s2), @G, metadata={op_name="@B/Dense_1/transpose"}
}

ENTRY main {
  x = f32[8,16] parameter(0)
  b = f32[16] parameter(1)
  w = f32[16,8] parameter(2)
  dy = f32[8,8] parameter(3)
  y = f32[8,8] fusion(x, b, w), kind=kOutput, calls=matmul_fwd
  dw = f32[16,8] fusion(x, b, dy), kind=kOutput, calls=matmul_grad
  ROOT out = (f32[8,8], f32[16,8]) tuple(y, dw)
}
"""

# The forward materializes the bias add in a fusion of its own, read by its matmul.
MATERIALIZED_FORWARD = NESTED_FORWARD.replace(
    "  y = f32[8,8] fusion(x, b, w), kind=kOutput, calls=matmul_fwd",
    "  h = f32[8,16] fusion(x, b), kind=kLoop, calls=bias_fwd\n"
    '  y = f32[8,8] dot(h, w), @D, metadata={op_name="@F/Dense_1/dot_general"}')


def _parsed(text: str):
    """The module, its op_name prefixes written out: @F the forward, @R the checkpoint's
    recompute, @B its backward; @D a matmul's dimension numbers, @G a weight gradient's."""
    for short, long in (("@R", "jit(loss)/transpose(jvp(jvp()))/checkpoint/rematted_computation/Block"),
                        ("@B", "jit(loss)/transpose(jvp(jvp()))/checkpoint/Block"), ("@F", "jit(loss)/jvp(Block)"),
                        ("@D", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
                        ("@G", "lhs_contracting_dims={0}, rhs_contracting_dims={0}")):
        text = text.replace(short, long)
    return hloparse.parse(text)


def test_a_recompute_nested_in_a_weight_gradients_fusion_is_model_work_where_the_forward_nests_it_too():
    assert ("bias_bwd", "ra") not in find_remat(_parsed(NESTED_FORWARD))


def test_a_recompute_nested_in_a_weight_gradients_fusion_is_remat_where_the_forward_materializes_it():
    assert ("bias_bwd", "ra") in find_remat(_parsed(MATERIALIZED_FORWARD))
