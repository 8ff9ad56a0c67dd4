"""The converts the program without remat may make where a scan offloads a matmul's bare output
`h = x @ w` to a stack in the host's memory (`offload_dot_with_no_batch_dims`) and every copy of the
activation is an operand fusion of its matmul, reading `h` wide
(analysis/hloflops/remat/host_stacked_activations.py; analysis/hloflops/remat/offloaded_sum_narrows.py,
`stored_sum_narrows`).

Held-out TPU draw 175 (scan, tanh, no bias): the program without remat stores tanh's output and
hands the next matmul a bf16 narrow of it, one convert of `[4, 128]` a layer this program never
runs (convert truth -1,536; the range was [0, 0]). Held-out TPU draw 144 (nnx_scan, relu with a bias
add): it narrows `h + b` once and widens it and narrows relu's result in each of two relu copies,
five converts of `[4, 64]` a layer (convert truth -2,304 in all; the range was [0, 1,536]). Each
nested activation here now stands for those converts (the low end only). The modules below are
those draws' shape, cut down."""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat

# A TPU module, scheduled: a forward loop writes `h` into a host stack (memory space 5) a step at a
# time and feeds `act(h)` to the next matmul; a backward loop reads `h` back and recomputes the
# activation for the weight gradient. @A is the activation (on `a0`, named `@F`/`@R`), @H the host
# stack's shape.
HOST_STACKED = """HloModule host_stacked, is_scheduled=true, entry_computation_layout=@L

matmul_out {
  u0 = f32[2,32] parameter(0)
  u1 = f32[32,32] parameter(1)
  ROOT ud = f32[2,32] dot(u0, u1), @D, metadata={op_name="@F/linear/dot_general"}, @T
}

act_fwd {
  a0 = f32[2,32] parameter(0)
  p1 = f32[32] parameter(1)
@A_F
}

matmul_fwd {
  q0 = f32[2,32] parameter(0)
  q1 = f32[32] parameter(1)
  q2 = f32[32,32] parameter(2)
  f = f32[2,32] fusion(q0, q1), kind=kLoop, calls=act_fwd
  ROOT d = f32[2,32] dot(f, q2), @D, metadata={op_name="@F/linear_1/dot_general"}
}

fwd_body {
  fp = (s32[], f32[2,32], @H, f32[32], f32[32,32]) parameter(0)
  fi = s32[] get-tuple-element(fp), index=0
  fx = f32[2,32] get-tuple-element(fp), index=1
  fs = @H get-tuple-element(fp), index=2
  fb = f32[32] get-tuple-element(fp), index=3
  fw = f32[32,32] get-tuple-element(fp), index=4
  h = f32[2,32] fusion(fx, fw), kind=kOutput, calls=matmul_out
  y = f32[2,32] fusion(h, fb, fw), kind=kOutput, calls=matmul_fwd
  h1 = f32[1,2,32] bitcast(h)
  c0 = s32[] constant(0)
  us = ((@H, f32[1,2,32], s32[], s32[], s32[]), @H, u32[]) dynamic-update-slice-start(fs, h1, fi, c0, c0)
  fs2 = @H dynamic-update-slice-done(us)
  one = s32[] constant(1)
  fi2 = s32[] add(fi, one)
  ROOT fo = (s32[], f32[2,32], @H, f32[32], f32[32,32]) tuple(fi2, y, fs2, fb, fw)
}

fwd_cond {
  cp = (s32[], f32[2,32], @H, f32[32], f32[32,32]) parameter(0)
  ci = s32[] get-tuple-element(cp), index=0
  two = s32[] constant(2)
  ROOT lt = pred[] compare(ci, two), direction=LT
}

act_bwd {
  a0 = f32[2,32] parameter(0)
  p1 = f32[32] parameter(1)
@A_R
}

matmul_grad {
  s0 = f32[2,32] parameter(0)
  s1 = f32[32] parameter(1)
  s2 = f32[2,32] parameter(2)
  g = f32[2,32] fusion(s0, s1), kind=kLoop, calls=act_bwd
  ROOT dw = f32[32,32] dot(g, s2), @G, metadata={op_name="@B/linear_1/dot_general"}
}

bwd_body {
  bp = (s32[], @H, f32[32], f32[2,32], f32[32,32]) parameter(0)
  bi = s32[] get-tuple-element(bp), index=0
  bs = @H get-tuple-element(bp), index=1
  bb = f32[32] get-tuple-element(bp), index=2
  bdy = f32[2,32] get-tuple-element(bp), index=3
  b0 = s32[] constant(0)
  ss = ((@H, s32[], s32[], s32[]), f32[1,2,32], u32[]) dynamic-slice-start(bs, bi, b0, b0), dynamic_slice_sizes={1,2,32}
  ds = f32[1,2,32] dynamic-slice-done(ss)
  bh = f32[2,32] bitcast(ds)
  bdw = f32[32,32] fusion(bh, bb, bdy), kind=kOutput, calls=matmul_grad
  bone = s32[] constant(1)
  bi2 = s32[] add(bi, bone)
  ROOT bo = (s32[], @H, f32[32], f32[2,32], f32[32,32]) tuple(bi2, bs, bb, bdy, bdw)
}

bwd_cond {
  dp = (s32[], @H, f32[32], f32[2,32], f32[32,32]) parameter(0)
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
  stack = @H broadcast(zs), dimensions={}
  fin = (s32[], f32[2,32], @H, f32[32], f32[32,32]) tuple(zero, x, stack, b, w)
  fl = (s32[], f32[2,32], @H, f32[32], f32[32,32]) while(fin), condition=fwd_cond, body=fwd_body
  out = f32[2,32] get-tuple-element(fl), index=1
  saved = @H get-tuple-element(fl), index=2
  bin = (s32[], @H, f32[32], f32[2,32], f32[32,32]) tuple(zero, saved, b, dy, w)
  bl = (s32[], @H, f32[32], f32[2,32], f32[32,32]) while(bin), condition=bwd_cond, body=bwd_body
  dw = f32[32,32] get-tuple-element(bl), index=4
  ROOT res = (f32[2,32], f32[32,32]) tuple(out, dw)
}
"""

# tanh straight off the matmul's output (draw 175), and relu of a bias add (draw 144).
TANH = "  ROOT t = f32[2,32] tanh(a0), metadata={op_name=\"@N/tanh\"}\n"
RELU = ("  pb = f32[2,32] broadcast(p1), dimensions={1}\n"
        "  s = f32[2,32] add(a0, pb), metadata={op_name=\"@N/linear/add\"}\n"
        "  z = f32[] constant(0)\n"
        "  zb = f32[2,32] broadcast(z), dimensions={}\n"
        "  ROOT t = f32[2,32] maximum(s, zb), metadata={op_name=\"@N/jit(relu)/max\"}\n")
ON_HOST = "f32[2,2,32]{2,1,0:T(2,128)S(5)}"
ON_DEVICE = "f32[2,2,32]{2,1,0:T(2,128)}"


def _parsed(activation: str, stack: str = ON_HOST):
    """The module with its activation and stack: op_name prefixes @F the forward, @R the
    checkpoint's recompute, @B its backward; @D a matmul's dimension numbers, @G a weight
    gradient's; @L the entry's tiled layout and @T TPU's backend config (a TPU module)."""
    text = HOST_STACKED.replace("@A_F", activation.replace("@N", "@F").rstrip("\n")) \
        .replace("@A_R", activation.replace("@N", "@R").rstrip("\n")).replace("@H", stack)
    for short, long in (("@R", "jit(loss)/transpose(jvp())/while/body/checkpoint/rematted_computation"),
                        ("@B", "jit(loss)/transpose(jvp())/while/body/checkpoint"),
                        ("@F", "jit(loss)/jvp()/while/body"),
                        ("@D", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
                        ("@G", "lhs_contracting_dims={0}, rhs_contracting_dims={0}"),
                        ("@L", "{(f32[2,32]{1,0:T(2,128)})->f32[2,32]{1,0:T(2,128)}}"),
                        ("@T", 'backend_config={"scoped_memory_configs":[]}')):
        text = text.replace(short, long)
    return hloparse.parse(text)


def test_tanh_of_a_host_stacked_matmul_output_stands_for_the_twins_narrow():
    index = find_remat(_parsed(TANH))
    # tanh counts no FLOPs of its own: each copy stands for one convert of its 64 elements.
    assert index.twin_narrows == {("act_fwd", "t"): (1, 64), ("act_bwd", "t"): (1, 64)}


def test_relu_of_a_host_stacked_sum_stands_for_the_twins_widens_and_narrows():
    index = find_remat(_parsed(RELU))
    # The forward's copy: the twin's widen and narrow there, and its narrow of `h + b` once; the
    # recompute's, reading `h` back from the host stack: a widen and a narrow.
    assert index.twin_copies.get(("act_fwd", "t")) == 3
    assert index.twin_copies.get(("act_bwd", "t")) == 2


def test_a_stack_on_the_device_without_the_policys_rounding_is_left_alone():
    # No host memory and no identity rounding: nothing says `h` is a residual the policy saved.
    for activation in (TANH, RELU):
        index = find_remat(_parsed(activation, ON_DEVICE))
        assert not index.twin_narrows and ("act_fwd", "t") not in index.twin_copies


def test_the_narrows_lower_the_ranges_low_end_by_their_converts():
    from hloflops.accounting import account
    acc = account(_parsed(TANH), xla={"flops": 0.0})
    # Each loop runs twice: one convert of 64 elements a step, for each of the two copies.
    narrows = [h for h in acc.remat_hinges if h.opcode == "convert"]
    assert sorted((h.computation, h.flops, h.twin_copies) for h in narrows) == \
        [("act_bwd", 128, 1), ("act_fwd", 128, 1)]
    assert acc.remat_flops_bounds[0] == acc.remat_flops - 256
