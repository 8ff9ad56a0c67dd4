"""A recomputed activation a scan's backward loop hands out of the fusion that also computes the
gradient through it (hloflops.remat.merged_recompute_hand_outs): the program without remat computes
the activation's chain in its forward loop for the next matmul, for the stack saving it for the
weight gradient and for the stacks of the derivative's residuals, in one fusion or several as its
fusion goes (wtpu 349, nnx.scan gelu under fsdp: three copies of gelu's chain per layer there
against this program's two; multiply +480 and add +96 counted with a range of width 0). Each
remat-named cheap op on the handed-out value's chain is a `twin_copies` hinge of one copy, the
range's low end only.

Hand-written after that draw: `merged` recomputes `y = h * (1 + tanh(h + c * h * h))` and hands
it out for the weight gradient's matmul beside the gradient `g * (1 - t) * (1 + t)`.
"""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat

SCAN = """HloModule scan_gelu, is_scheduled=true, entry_computation_layout=@L

act_fwd {
  f0 = f32[8,16] parameter(0)
  fs = f32[8,16] multiply(f0, f0), metadata={op_name="@F/integer_pow"}
  fc = f32[] constant(0.044715)
  fb = f32[8,16] broadcast(fc), dimensions={}
  fu = f32[8,16] multiply(fs, fb), metadata={op_name="@F/mul"}
  fa = f32[8,16] add(f0, fu), metadata={op_name="@F/add"}
  ft = f32[8,16] tanh(fa), metadata={op_name="@F/tanh"}
  fone = f32[] constant(1)
  fones = f32[8,16] broadcast(fone), dimensions={}
  fp = f32[8,16] add(ft, fones), metadata={op_name="@F/add"}
  ROOT fy = f32[8,16] multiply(f0, fp), metadata={op_name="@F/mul"}
}

merged {
  m0 = f32[8,16] parameter(0)
  m1 = f32[8,16] parameter(1)
  s = f32[8,16] multiply(m0, m0), metadata={op_name="@R/integer_pow"}
  c = f32[] constant(0.044715)
  bc = f32[8,16] broadcast(c), dimensions={}
  u = f32[8,16] multiply(s, bc), metadata={op_name="@R/mul"}
  a = f32[8,16] add(m0, u), metadata={op_name="@R/add"}
  t = f32[8,16] tanh(a), metadata={op_name="@R/tanh"}
  one = f32[] constant(1)
  ones = f32[8,16] broadcast(one), dimensions={}
  p = f32[8,16] add(t, ones), metadata={op_name="@R/add"}
  y = f32[8,16] multiply(m0, p), metadata={op_name="@R/mul"}
  d = f32[8,16] subtract(ones, t), metadata={op_name="@R/sub"}
  gm = f32[8,16] multiply(m1, d), metadata={op_name="@B/mul"}
  gg = f32[8,16] multiply(gm, p), metadata={op_name="@B/mul"}
  ROOT mt = (f32[8,16], f32[8,16]) @ROOT
}

bwd_cond {
  c = (s32[], f32[8,16], f32[8,16], f32[16,16]) parameter(0)
  ci = s32[] get-tuple-element(c), index=0
  n = s32[] constant(2)
  ROOT lt = pred[] compare(ci, n), direction=LT
}

bwd_body {
  b = (s32[], f32[8,16], f32[8,16], f32[16,16]) parameter(0)
  i = s32[] get-tuple-element(b), index=0
  h = f32[8,16] get-tuple-element(b), index=1
  dy = f32[8,16] get-tuple-element(b), index=2
  w = f32[16,16] get-tuple-element(b), index=3
  mf = (f32[8,16], f32[8,16]) fusion(h, dy), kind=kLoop, calls=merged
  yo = f32[8,16] get-tuple-element(mf), index=0
  go = f32[8,16] get-tuple-element(mf), index=1
  wg = f32[16,16] dot(yo, dy), @G, metadata={op_name="@B/dot_general"}, @T
  k = s32[] constant(1)
  j = s32[] add(i, k)
  ROOT o = (s32[], f32[8,16], f32[8,16], f32[16,16]) tuple(j, h, go, wg)
}

ENTRY main {
  x0 = f32[8,16] parameter(0)
  dy = f32[8,16] parameter(1)
  w = f32[16,16] parameter(2)
  hf = f32[8,16] fusion(x0), kind=kLoop, calls=act_fwd
  y = f32[8,16] dot(hf, w), @D, metadata={op_name="@F/dense/dot_general"}, @T
  z = s32[] constant(0)
  s = (s32[], f32[8,16], f32[8,16], f32[16,16]) tuple(z, x0, dy, w)
  l = (s32[], f32[8,16], f32[8,16], f32[16,16]) while(s), condition=bwd_cond, body=bwd_body
  g = f32[8,16] get-tuple-element(l), index=2
  ROOT out = (f32[8,16], f32[8,16]) tuple(y, g)
}
"""

# The recompute's chain under `y` (the tanh is no cheap op; `d` is the derivative's, not `y`'s).
Y_CHAIN = {"s", "u", "a", "p", "y"}


def _parsed(root: str = "tuple(y, gg)"):
    """The module, its op_name prefixes written out: @F the forward, @R the checkpoint's
    recompute, @B its backward; @D, @G a matmul's and a weight gradient's dimension numbers, @L
    the entry's layout and @T TPU's backend config (what makes it a TPU module); @ROOT the
    merged fusion's outputs."""
    text = SCAN.replace("@ROOT", root)
    for short, long in (("@R", "jit(loss)/transpose(jvp())/while/body/checkpoint/rematted_computation"),
                        ("@B", "jit(loss)/transpose(jvp())/while/body/checkpoint"), ("@F", "jit(loss)/jvp()"),
                        ("@D", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
                        ("@G", "lhs_contracting_dims={0}, rhs_contracting_dims={0}"),
                        ("@L", "{(f32[8,16]{1,0:T(8,128)})->f32[8,16]{1,0:T(8,128)}}"),
                        ("@T", 'backend_config={"scoped_memory_configs":[]}')):
        text = text.replace(short, long)
    return hloparse.parse(text)


def _copies(index) -> dict[str, int]:
    return {key[1]: n for key, n in index.twin_copies.items() if key[0] == "merged"}


def test_a_recomputed_activation_handed_out_beside_its_gradient_hinges_one_more_copy_of_its_chain():
    copies = _copies(find_remat(_parsed()))
    assert {name for name in copies if name in Y_CHAIN} == Y_CHAIN
    assert all(copies[name] >= 1 for name in Y_CHAIN)
    assert "d" not in copies and "gm" not in copies and "gg" not in copies


def test_no_hinge_for_an_activation_handed_out_alone():
    # The gradient goes out of another fusion (here: none is an output): the recompute's fusions
    # split as the twin's saving fusions do, and backward_loop_copies' count stands.
    assert not set(_copies(find_remat(_parsed("tuple(y, p)")))) & Y_CHAIN
