"""The converts the program without remat may make where this program saves a matmul's bare output
`h = x @ w` wide in a loop's device stack and nests `relu(h + b)` in each matmul's operand fusion
(analysis/hloflops/remat/offloaded_sum_narrows.py, `stored_sum_narrows`).

Held-out TPU draw 83 (hk_layer_stack, dots_with_no_batch_dims_saveable, relu): this program computes
relu in f32 from the stored `h` with no converts; the program without remat stores relu's output,
narrows `h + b` in its matmul's fusion and widens it and narrows relu's result in each of its two
relu copies: five converts of `[2, 32]` a layer (convert truth -640, the range was [256, 512], its
truth -256). The forward's and the recompute's nested activations now stand for those converts (a
`twin_copies` hinge: the low end only). The module below is that draw's shape, cut down."""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat

# A TPU module (tiled layouts, TPU's backend config), scheduled: after optimization. A forward loop
# stores the policy's `h` (jax's identity rounding marks it) in an f32 stack; a backward loop reads
# it back and recomputes relu from it for the weight gradient.
STACKED = """HloModule stacked_relu, is_scheduled=true, entry_computation_layout=@L

saved_matmul {
  u0 = f32[2,32] parameter(0)
  u1 = f32[32,32] parameter(1)
  ud = f32[2,32] dot(u0, u1), @D, metadata={op_name="@F/linear/dot_general"}, @T
  ROOT ur = f32[2,32] reduce-precision(ud), exponent_bits=8, mantissa_bits=23
}

relu_fwd {
  p0 = f32[2,32] parameter(0)
  p1 = f32[32] parameter(1)
  pb = f32[2,32] broadcast(p1), dimensions={1}
  a = f32[2,32] add(p0, pb), metadata={op_name="@F/linear/add"}
  z = f32[] constant(0)
  zb = f32[2,32] broadcast(z), dimensions={}
  ROOT m = f32[2,32] maximum(a, zb), metadata={op_name="@F/jit(relu)/max"}
}

matmul_fwd {
  q0 = f32[2,32] parameter(0)
  q1 = f32[32] parameter(1)
  q2 = f32[32,32] parameter(2)
  f = f32[2,32] fusion(q0, q1), kind=kLoop, calls=relu_fwd
  ROOT d = f32[2,32] dot(f, q2), @D, metadata={op_name="@F/linear_1/dot_general"}
}

fwd_body {
  fp = (s32[], f32[2,32], f32[2,2,32], f32[32], f32[32,32]) parameter(0)
  fi = s32[] get-tuple-element(fp), index=0
  fx = f32[2,32] get-tuple-element(fp), index=1
  fs = f32[2,2,32] get-tuple-element(fp), index=2
  fb = f32[32] get-tuple-element(fp), index=3
  fw = f32[32,32] get-tuple-element(fp), index=4
  h = f32[2,32] fusion(fx, fw), kind=kOutput, calls=saved_matmul
  y = f32[2,32] fusion(h, fb, fw), kind=kOutput, calls=matmul_fwd
  h1 = f32[1,2,32] bitcast(h)
  c0 = s32[] constant(0)
  fs2 = f32[2,2,32] dynamic-update-slice(fs, h1, fi, c0, c0)
  one = s32[] constant(1)
  fi2 = s32[] add(fi, one)
  ROOT fo = (s32[], f32[2,32], f32[2,2,32], f32[32], f32[32,32]) tuple(fi2, y, fs2, fb, fw)
}

fwd_cond {
  cp = (s32[], f32[2,32], f32[2,2,32], f32[32], f32[32,32]) parameter(0)
  ci = s32[] get-tuple-element(cp), index=0
  two = s32[] constant(2)
  ROOT lt = pred[] compare(ci, two), direction=LT
}

relu_bwd {
  r0 = f32[2,32] parameter(0)
  r1 = f32[32] parameter(1)
  rb = f32[2,32] broadcast(r1), dimensions={1}
  ra = f32[2,32] add(r0, rb), metadata={op_name="@R/linear/add"}
  rz = f32[] constant(0)
  rzb = f32[2,32] broadcast(rz), dimensions={}
  ROOT rm = f32[2,32] maximum(ra, rzb), metadata={op_name="@R/jit(relu)/max"}
}

matmul_grad {
  s0 = f32[2,32] parameter(0)
  s1 = f32[32] parameter(1)
  s2 = f32[2,32] parameter(2)
  g = f32[2,32] fusion(s0, s1), kind=kLoop, calls=relu_bwd
  ROOT dw = f32[32,32] dot(g, s2), @G, metadata={op_name="@B/linear_1/dot_general"}
}

bwd_body {
  bp = (s32[], f32[2,2,32], f32[32], f32[2,32], f32[32,32]) parameter(0)
  bi = s32[] get-tuple-element(bp), index=0
  bs = f32[2,2,32] get-tuple-element(bp), index=1
  bb = f32[32] get-tuple-element(bp), index=2
  bdy = f32[2,32] get-tuple-element(bp), index=3
  b0 = s32[] constant(0)
  ds = f32[1,2,32] dynamic-slice(bs, bi, b0, b0), dynamic_slice_sizes={1,2,32}
  bh = f32[2,32] bitcast(ds)
  bdw = f32[32,32] fusion(bh, bb, bdy), kind=kOutput, calls=matmul_grad
  bone = s32[] constant(1)
  bi2 = s32[] add(bi, bone)
  ROOT bo = (s32[], f32[2,2,32], f32[32], f32[2,32], f32[32,32]) tuple(bi2, bs, bb, bdy, bdw)
}

bwd_cond {
  dp = (s32[], f32[2,2,32], f32[32], f32[2,32], f32[32,32]) parameter(0)
  di = s32[] get-tuple-element(dp), index=0
  dtwo = s32[] constant(2)
  ROOT dlt = pred[] compare(di, dtwo), direction=LT
}

ENTRY main {
  x = f32[2,32] parameter(0)
  b = f32[32] parameter(1)
  w = f32[32,32] parameter(2)
  dy = f32[2,32] parameter(3)
  zero = s32[] constant(0)
  zs = f32[] constant(0)
  stack = f32[2,2,32] broadcast(zs), dimensions={}
  fin = (s32[], f32[2,32], f32[2,2,32], f32[32], f32[32,32]) tuple(zero, x, stack, b, w)
  fl = (s32[], f32[2,32], f32[2,2,32], f32[32], f32[32,32]) while(fin), condition=fwd_cond, body=fwd_body
  out = f32[2,32] get-tuple-element(fl), index=1
  saved = f32[2,2,32] get-tuple-element(fl), index=2
  bin = (s32[], f32[2,2,32], f32[32], f32[2,32], f32[32,32]) tuple(zero, saved, b, dy, w)
  bl = (s32[], f32[2,2,32], f32[32], f32[2,32], f32[32,32]) while(bin), condition=bwd_cond, body=bwd_body
  dw = f32[32,32] get-tuple-element(bl), index=4
  ROOT res = (f32[2,32], f32[32,32]) tuple(out, dw)
}
"""


def _parsed(text: str):
    """The module, its op_name prefixes written out: @F the forward, @R the checkpoint's
    recompute, @B its backward; @D a matmul's dimension numbers, @G a weight gradient's; @L the
    entry's tiled layout and @T TPU's backend config (what makes it a TPU module)."""
    for short, long in (("@R", "jit(loss)/transpose(jvp())/while/body/checkpoint/rematted_computation"),
                        ("@B", "jit(loss)/transpose(jvp())/while/body/checkpoint"),
                        ("@F", "jit(loss)/jvp()/while/body"),
                        ("@D", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
                        ("@G", "lhs_contracting_dims={0}, rhs_contracting_dims={0}"),
                        ("@L", "{(f32[2,32]{1,0:T(2,128)})->f32[2,32]{1,0:T(2,128)}}"),
                        ("@T", 'backend_config={"scoped_memory_configs":[]}')):
        text = text.replace(short, long)
    return hloparse.parse(text)


def test_relu_copies_of_a_matmul_output_a_loop_stores_wide_lower_the_range():
    twin = find_remat(_parsed(STACKED)).twin_copies
    # The forward's copy: the twin's widen and narrow there, and its narrow of `h + b` once.
    assert twin.get(("relu_fwd", "m")) == 3
    # The recompute's copy, reading `h` back from the stack: a widen and a narrow.
    assert twin.get(("relu_bwd", "rm")) == 2


def test_without_the_policy_saving_the_matmul_output_the_rule_stands_aside():
    # No identity rounding: `h` is no residual the policy names, and the stack holds something
    # else's value: nothing says the twin narrows it.
    plain = STACKED.replace("  ROOT ur = f32[2,32] reduce-precision(ud), exponent_bits=8, mantissa_bits=23\n", "") \
        .replace("  ud = f32[2,32] dot(", "  ROOT ud = f32[2,32] dot(")
    twin = find_remat(_parsed(plain)).twin_copies
    assert ("relu_fwd", "m") not in twin and ("relu_bwd", "rm") not in twin


def test_a_forward_copy_narrowing_the_activation_for_its_reader_counts_the_widen_alone():
    # TPU draw 40 (dots_saveable, tp): the forward's relu is a fusion of its own narrowing relu's
    # result for the next matmul, a narrow the twin makes too; the twin's widen of the stored sum
    # and its narrow of `h + b` remain (convert truth -4,608 with the recompute's widen and narrow).
    narrowing = STACKED.replace(
        "  ROOT m = f32[2,32] maximum(a, zb), metadata={op_name=\"@F/jit(relu)/max\"}\n",
        "  m = f32[2,32] maximum(a, zb), metadata={op_name=\"@F/jit(relu)/max\"}\n"
        "  ROOT n = bf16[2,32] convert(m)\n").replace(
        "  f = f32[2,32] fusion(q0, q1), kind=kLoop, calls=relu_fwd\n",
        "  f = bf16[2,32] fusion(q0, q1), kind=kLoop, calls=relu_fwd\n")
    twin = find_remat(_parsed(narrowing)).twin_copies
    assert twin.get(("relu_fwd", "n")) == 2  # its widen and the narrow of `h + b`, once
    assert twin.get(("relu_bwd", "rm")) == 2
