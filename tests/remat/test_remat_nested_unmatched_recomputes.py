"""A recompute TPU nests in a backward matmul's fusion whose value no forward op computes exactly
(analysis/hloflops/remat/offloaded_residuals.py `nested_offloaded_recomputes`).

TPU nests a matmul's cheap producers inside the matmul's fusion: the forward's relu inside the next
layer's matmul fusion, the recompute's inside the fusion of that layer's weight gradient. Where the
forward too computes the value only nested that way, the program without remat builds it inside its
weight gradient's fusion the same way: model FLOPs. The recompute may read its matmul's output in
another precision than the forward (an f32 product against a bf16 one widened: TPU draw 22, a
gradient accumulation; 27, 45, 48, 50 with gelu and layer norms), so that nothing it computes has a
forward op's exact value; the like forward ops (opcode, shape, frame, name inside the checkpoint)
stand for it, as they do behind an offload policy's round trip through the host. A bias add of a
matmul output stays as paired: the program without remat stores the sum from its matmul's fusion."""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat

# A TPU module (TPU's backend config), scheduled: after optimization.
NESTED = """HloModule nested_relu, is_scheduled=true, entry_computation_layout=@L

matmul_fwd_0 {
  u0 = f32[8,4] parameter(0)
  u1 = f32[4,16] parameter(1)
  ROOT ud = bf16[8,16] dot(u0, u1), @D, metadata={op_name="@F/dense_0/dot_general"}, @T
}

relu_fwd {
  p0 = bf16[8,16] parameter(0)
  p1 = f32[16] parameter(1)
  pw = f32[8,16] convert(p0)
  pb = f32[8,16] broadcast(p1), dimensions={1}
  a = f32[8,16] add(pw, pb), metadata={op_name="@F/dense_0/add"}
  z = f32[] constant(0)
  zb = f32[8,16] broadcast(z), dimensions={}
  ROOT m = f32[8,16] maximum(a, zb), metadata={op_name="@F/relu/max"}
}

matmul_fwd_1 {
  q0 = bf16[8,16] parameter(0)
  q1 = f32[16] parameter(1)
  q2 = f32[16,8] parameter(2)
  f = f32[8,16] fusion(q0, q1), kind=kLoop, calls=relu_fwd
  ROOT d = f32[8,8] dot(f, q2), @D, metadata={op_name="@F/dense_1/dot_general"}
}

matmul_recompute {
  v0 = f32[8,4] parameter(0)
  v1 = f32[4,16] parameter(1)
  ROOT vd = f32[8,16] dot(v0, v1), @D, metadata={op_name="@R/dense_0/dot_general"}, @T
}

relu_bwd {
  r0 = f32[8,16] parameter(0)
  r1 = f32[16] parameter(1)
  rb = f32[8,16] broadcast(r1), dimensions={1}
  ra = f32[8,16] add(r0, rb), metadata={op_name="@R/dense_0/add"}
  rz = f32[] constant(0)
  rzb = f32[8,16] broadcast(rz), dimensions={}
  ROOT rm = f32[8,16] maximum(ra, rzb), metadata={op_name="@R/relu/max"}
}

matmul_grad {
  s0 = f32[8,16] parameter(0)
  s1 = f32[16] parameter(1)
  s2 = f32[8,8] parameter(2)
  g = f32[8,16] fusion(s0, s1), kind=kLoop, calls=relu_bwd
  ROOT dw = f32[16,8] dot(g, s2), @G, metadata={op_name="@B/dense_1/transpose"}
}

ENTRY main {
  x0 = f32[8,4] parameter(0)
  w0 = f32[4,16] parameter(4)
  b = f32[16] parameter(1)
  w = f32[16,8] parameter(2)
  dy = f32[8,8] parameter(3)
  h = bf16[8,16] fusion(x0, w0), kind=kOutput, calls=matmul_fwd_0
  y = f32[8,8] fusion(h, b, w), kind=kOutput, calls=matmul_fwd_1
  x = f32[8,16] fusion(x0, w0), kind=kOutput, calls=matmul_recompute
  dw = f32[16,8] fusion(x, b, dy), kind=kOutput, calls=matmul_grad
  ROOT out = (f32[8,8], f32[16,8]) tuple(y, dw)
}
"""


def _parsed(text: str):
    """The module, its op_name prefixes written out: @F the forward, @R the checkpoint's
    recompute, @B its backward; @D a matmul's dimension numbers, @G a weight gradient's; @L the
    entry's layout and @T TPU's backend config (what makes it a TPU module)."""
    for short, long in (("@R", "jit(loss)/transpose(jvp(jvp()))/checkpoint/rematted_computation/Block"),
                        ("@B", "jit(loss)/transpose(jvp(jvp()))/checkpoint/Block"), ("@F", "jit(loss)/jvp(Block)"),
                        ("@D", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
                        ("@G", "lhs_contracting_dims={0}, rhs_contracting_dims={0}"),
                        ("@L", "{(f32[8,4]{1,0:T(8,128)})->f32[8,8]{1,0:T(8,128)}}"),
                        ("@T", 'backend_config={"scoped_memory_configs":[]}')):
        text = text.replace(short, long)
    return hloparse.parse(text)


def test_the_recomputes_matmul_is_recompute():
    remat = find_remat(_parsed(NESTED)).remat
    assert ("matmul_recompute", "vd") in remat


def test_a_recompute_nested_as_the_forward_nests_its_own_is_model_work_without_an_exact_twin():
    remat = find_remat(_parsed(NESTED)).remat
    assert ("relu_bwd", "rm") not in remat
    assert ("relu_bwd", "ra") in remat  # the bias add of the recomputed product: as paired


def test_where_the_forward_materializes_the_value_the_nested_recompute_stays_recompute():
    # The forward's relu handed out of a fusion of its own (stored): the program without remat's
    # weight gradient reads it stored, and the recompute's nested copy runs because of remat.
    stored = NESTED.replace("  f = f32[8,16] fusion(q0, q1), kind=kLoop, calls=relu_fwd\n", "") \
        .replace("matmul_fwd_1 {\n  q0 = bf16[8,16] parameter(0)", "matmul_fwd_1 {\n  f = f32[8,16] parameter(0)") \
        .replace("  y = f32[8,8] fusion(h, b, w)", "  fr = f32[8,16] fusion(h, b), kind=kLoop, calls=relu_fwd\n"
                 "  y = f32[8,8] fusion(fr, b, w)")
    remat = find_remat(_parsed(stored)).remat
    assert ("relu_bwd", "rm") in remat
