"""Recomputes reading a matmul output an offload policy saves on the host
(analysis/hloflops/remat/offloaded_residuals.py).

jax's `offload_dot_with_no_batch_dims` saves the bare `x @ w` of a layer: the forward sends it to
the host (`copy-start` / `copy-done` into memory space 5) and the backward fetches it back. The
recompute reads that round trip as an input, so nothing it computes from it has a forward op's exact
value. Read through the round trip:

* the bias add of the saved product is recompute in every fusion that copies it: without remat XLA
  fuses it into the matmul's output fusion and stores the sum (TPU draws 4, 9, 25, 51, 55: add
  -192 to -40,960 after optimization);
* the gelu TPU nests inside the next layer's weight-gradient fusion, as the forward nests its own in
  its matmul's fusion, is model FLOPs: the program without remat builds it there the same way
  (draws 9, 25, 55: multiply +2,656 and +254,080 after optimization, 9 and 55 out of range); so
  where the weight gradient leaves its fusion widened to f32 with the stack's unit dimension, as a
  scan's stacked weight's does (held-out draw 92: multiply +6,553,600, out of range)."""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat

# A TPU module (tiled layouts, TPU's backend config), scheduled: after optimization.
OFFLOADED = """HloModule offloaded_gelu, is_scheduled=true, entry_computation_layout=@L

saved_matmul {
  u0 = f32[8,4] parameter(0)
  u1 = f32[4,16] parameter(1)
  ROOT ud = f32[8,16] dot(u0, u1), @D, metadata={op_name="@F/Dense_0/dot_general"}, @T
}

gelu_fwd {
  p0 = f32[8,16] parameter(0)
  p1 = f32[16] parameter(1)
  pb = f32[8,16] broadcast(p1), dimensions={1}
  a = f32[8,16] add(p0, pb), metadata={op_name="@F/Dense_0/add"}
  s = f32[8,16] multiply(a, a), metadata={op_name="@F/integer_pow"}
  t = f32[8,16] tanh(s), metadata={op_name="@F/tanh"}
  ROOT m = f32[8,16] multiply(a, t), metadata={op_name="@F/mul"}
}

matmul_fwd {
  q0 = f32[8,16] parameter(0)
  q1 = f32[16] parameter(1)
  q2 = f32[16,8] parameter(2)
  f = f32[8,16] fusion(q0, q1), kind=kLoop, calls=gelu_fwd
  ROOT d = f32[8,8] dot(f, q2), @D, metadata={op_name="@F/Dense_1/dot_general"}
}

gelu_bwd {
  r0 = f32[8,16] parameter(0)
  r1 = f32[16] parameter(1)
  rb = f32[8,16] broadcast(r1), dimensions={1}
  ra = f32[8,16] add(r0, rb), metadata={op_name="@R/Dense_0/add"}
  rs = f32[8,16] multiply(ra, ra), metadata={op_name="@R/integer_pow"}
  rt = f32[8,16] tanh(rs), metadata={op_name="@R/tanh"}
  ROOT rm = f32[8,16] multiply(ra, rt), metadata={op_name="@R/mul"}
}

matmul_grad {
  s0 = f32[8,16] parameter(0)
  s1 = f32[16] parameter(1)
  s2 = f32[8,8] parameter(2)
  g = f32[8,16] fusion(s0, s1), kind=kLoop, calls=gelu_bwd
  ROOT dw = f32[16,8] dot(g, s2), @G, metadata={op_name="@B/Dense_1/transpose"}
}

gelu_grad {
  v0 = f32[8,16] parameter(0)
  v1 = f32[16] parameter(1)
  v2 = f32[8,16] parameter(2)
  vb = f32[8,16] broadcast(v1), dimensions={1}
  va = f32[8,16] add(v0, vb), metadata={op_name="@R/Dense_0/add"}
  vt = f32[8,16] tanh(va), metadata={op_name="@R/tanh"}
  ROOT vg = f32[8,16] multiply(v2, vt), metadata={op_name="@B/mul"}
}

ENTRY main {
  x0 = f32[8,4] parameter(0)
  w0 = f32[4,16] parameter(4)
  b = f32[16] parameter(1)
  w = f32[16,8] parameter(2)
  dy = f32[8,8] parameter(3)
  dh = f32[8,16] parameter(5)
  h = f32[8,16] fusion(x0, w0), kind=kOutput, calls=saved_matmul
  y = f32[8,8] fusion(h, b, w), kind=kOutput, calls=matmul_fwd
  out = (f32[8,16]{1,0:S(5)}, f32[8,16]{1,0}, u32[]) copy-start(h)
  away = f32[8,16]{1,0:S(5)} copy-done(out)
  back = (f32[8,16]{1,0}, f32[8,16]{1,0:S(5)}, u32[]) copy-start(away)
  x = f32[8,16]{1,0} copy-done(back)
  dw = f32[16,8] fusion(x, b, dy), kind=kOutput, calls=matmul_grad
  dg = f32[8,16] fusion(x, b, dh), kind=kLoop, calls=gelu_grad
  ROOT out2 = (f32[8,8], f32[16,8], f32[8,16]) tuple(y, dw, dg)
}
"""


def _parsed(text: str):
    """The module, its op_name prefixes written out: @F the forward, @R the checkpoint's
    recompute, @B its backward; @D a matmul's dimension numbers, @G a weight gradient's; @L the
    entry's tiled layout and @T TPU's backend config (what makes it a TPU module)."""
    for short, long in (("@R", "jit(loss)/transpose(jvp(jvp()))/checkpoint/rematted_computation/Block"),
                        ("@B", "jit(loss)/transpose(jvp(jvp()))/checkpoint/Block"), ("@F", "jit(loss)/jvp(Block)"),
                        ("@D", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
                        ("@G", "lhs_contracting_dims={0}, rhs_contracting_dims={0}"),
                        ("@L", "{(f32[8,4]{1,0:T(8,128)})->f32[8,8]{1,0:T(8,128)}}"),
                        ("@T", 'backend_config={"scoped_memory_configs":[]}')):
        text = text.replace(short, long)
    return hloparse.parse(text)


def test_the_bias_add_of_an_offloaded_matmul_output_is_recompute_in_every_fusion_that_copies_it():
    remat = find_remat(_parsed(OFFLOADED)).remat
    assert ("gelu_bwd", "ra") in remat  # nested in the weight gradient's fusion
    assert ("gelu_grad", "va") in remat  # in gelu's gradient fusion
    assert ("gelu_fwd", "a") not in remat  # the forward's own copy: the program without remat's add


def test_a_recompute_nested_as_the_forward_nests_its_own_is_model_work_through_the_round_trip():
    remat = find_remat(_parsed(OFFLOADED)).remat
    assert not {("gelu_bwd", name) for name in ("rs", "rm")} & remat


def test_without_the_round_trip_through_the_host_the_rules_stand_aside():
    # The same program with the product moved within the device (a prefetch into another memory
    # space): a move is the value it moves, the recompute's gelu pairs with the forward's exactly,
    # and neither rule applies.
    on_device = OFFLOADED.replace("{1,0:S(5)}", "{1,0:S(1)}")
    remat = find_remat(_parsed(on_device)).remat
    assert not {("gelu_bwd", "ra"), ("gelu_grad", "va"), ("gelu_bwd", "rs"), ("gelu_bwd", "rm")} & remat


def test_a_recompute_nested_in_a_weight_gradient_handed_out_widened_for_its_stack_is_model_work():
    # A scan's stacked weight: its gradient leaves the matmul's fusion as `bitcast(convert(dot))`,
    # f32 with a unit dimension for the stack's dynamic-update-slice. Still a backward matmul's
    # fusion, nesting gelu as the forward nests its own.
    stacked = OFFLOADED.replace(
        """  ROOT dw = f32[16,8] dot(g, s2), @G, metadata={op_name="@B/Dense_1/transpose"}""",
        """  dw = bf16[16,8] dot(g, s2), @G, metadata={op_name="@B/Dense_1/transpose"}
  wide = f32[16,8] convert(dw), metadata={op_name="@B/broadcast_in_dim"}
  ROOT stacked = f32[1,16,8] bitcast(wide), metadata={op_name="@B/broadcast_in_dim"}""").replace(
        "dw = f32[16,8] fusion(x, b, dy)", "dw = f32[1,16,8] fusion(x, b, dy)").replace(
        "out2 = (f32[8,8], f32[16,8], f32[8,16])", "out2 = (f32[8,8], f32[1,16,8], f32[8,16])")
    assert "f32[1,16,8] bitcast(wide)" in stacked
    remat = find_remat(_parsed(stacked)).remat
    assert not {("gelu_bwd", name) for name in ("rs", "rm")} & remat
    assert ("gelu_bwd", "ra") in remat  # the bias add is still recompute (`offloaded_matmul_epilogues`)


def _gelu_in_its_own_fusion(handed_out: str) -> str:
    """OFFLOADED with the forward's gelu in a fusion of its own (not nested in the next matmul's),
    handing out `handed_out`: its bf16 narrow for the next matmul, or its f32 value."""
    narrowed = handed_out == "narrow"
    text = OFFLOADED.replace(
        """  ROOT m = f32[8,16] multiply(a, t), metadata={op_name="@F/mul"}""",
        """  m = f32[8,16] multiply(a, t), metadata={op_name="@F/mul"}
  ROOT n = bf16[8,16] convert(m)""" if narrowed else
        """  ROOT m = f32[8,16] multiply(a, t), metadata={op_name="@F/mul"}""").replace(
        """  q0 = f32[8,16] parameter(0)
  q1 = f32[16] parameter(1)
  q2 = f32[16,8] parameter(2)
  f = f32[8,16] fusion(q0, q1), kind=kLoop, calls=gelu_fwd
  ROOT d = f32[8,8] dot(f, q2), @D""",
        f"""  q0 = {'bf16' if narrowed else 'f32'}[8,16] parameter(0)
  q2 = f32[16,8] parameter(1)
  ROOT d = f32[8,8] dot(q0, q2), @D""").replace(
        "  y = f32[8,8] fusion(h, b, w), kind=kOutput, calls=matmul_fwd",
        f"""  f = {'bf16' if narrowed else 'f32'}[8,16] fusion(h, b), kind=kLoop, calls=gelu_fwd
  y = f32[8,8] fusion(f, w), kind=kOutput, calls=matmul_fwd""")
    assert "calls=gelu_fwd\n  y = " in text
    return text


def test_a_recompute_nested_where_the_forward_keeps_the_value_inside_its_own_fusion_is_model_work():
    # Held-out TPU draw 100: the forward computes gelu in a fusion of its own and hands out only its
    # bf16 narrow, so no program stores gelu's f32 value, and the program without remat rebuilds it
    # in the weight gradient's fusion as the recompute does (multiply +4,240, add +2,048 before).
    remat = find_remat(_parsed(_gelu_in_its_own_fusion("narrow"))).remat
    assert not {("gelu_bwd", name) for name in ("rs", "rm")} & remat
    assert ("gelu_bwd", "ra") in remat  # the bias add is still recompute (`offloaded_matmul_epilogues`)


def test_a_forward_fusion_handing_out_the_value_itself_keeps_the_recompute_counted():
    # The forward hands out gelu's f32 value: the program without remat may store it for the weight
    # gradient and compute nothing there, so the recompute stays remat.
    remat = find_remat(_parsed(_gelu_in_its_own_fusion("wide"))).remat
    assert ("gelu_bwd", "rm") in remat
