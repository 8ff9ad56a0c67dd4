"""bf16 casts after optimization (issue 28, fourth round). XLA casts one bf16 weight to f32 in
two orders: `bitcast(convert(w))` for the forward's dot and `convert(bitcast(w))` for the
backward's, where the checkpoint's transpose re-read the weight. One value: numbered alike
(hloflops.remat.values), and the second cast is work only the program with remat runs
(hloflops.remat.marks.casts_in_checkpoint_transpose)."""

from __future__ import annotations

import hloparse
from hloflops.remat.values import value_numbers

CASTS = """
HloModule casts

ENTRY main {
  w = bf16[1,64,32]{2,1,0} parameter(0)
  forward = f32[1,64,32]{2,1,0} convert(w)
  reshaped = bf16[64,32]{1,0} bitcast(w)
  backward = f32[64,32]{1,0} convert(reshaped)
  half = bf16[1,32,32]{2,1,0} slice(w), slice={[0:1], [0:32], [0:32]}
  cast_half = f32[1,32,32]{2,1,0} convert(half)
  transposed = bf16[32,64]{0,1} transpose(reshaped), dimensions={1,0}
  cast_transposed = f32[32,64]{0,1} convert(transposed)
  pair = (f32[1,64,32]{2,1,0}, f32[64,32]{1,0}) tuple(forward, backward)
  ROOT out = ((f32[1,64,32]{2,1,0}, f32[64,32]{1,0}), f32[1,32,32]{2,1,0}, f32[32,64]{0,1}) tuple(pair, cast_half,
      cast_transposed)
}
"""


def test_a_cast_of_a_reshaped_value_is_the_cast_of_the_value():
    values = value_numbers(hloparse.parse(CASTS)).exact
    assert values[("main", "forward")] == values[("main", "backward")]


def test_casts_of_other_elements_or_another_order_stay_apart():
    values = value_numbers(hloparse.parse(CASTS)).exact
    assert values[("main", "cast_half")] != values[("main", "forward")]  # half of the elements
    assert values[("main", "cast_transposed")] != values[("main", "forward")]  # another order
    assert len({values[("main", n)] for n in ("forward", "cast_half", "cast_transposed")}) == 3


def _cast_twice(bitcast_name: str, backward_dot: str = "jit(loss)/transpose(jvp())/closed_call/dot_general") -> str:
    meta = lambda name: f'metadata={{op_name="{name}"}}'  # noqa: E731
    forward, backward = meta("jit(loss)/jvp()/closed_call/dot_general"), meta(backward_dot)
    return f"""
HloModule cast_twice, is_scheduled=true

ENTRY main {{
  x = f32[4,64]{{1,0}} parameter(0)
  w = bf16[1,64,32]{{2,1,0}} parameter(1)
  g = f32[4,32]{{1,0}} parameter(2)
  cast = f32[1,64,32]{{2,1,0}} convert(w)
  wf = f32[64,32]{{1,0}} bitcast(cast)
  y = f32[4,32]{{1,0}} dot(x, wf), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}, {forward}
  t = f32[4,32]{{1,0}} tanh(y), {meta("jit(loss)/jvp()/closed_call/tanh")}
  r = f32[4,32]{{1,0}} tanh(y), {meta("jit(loss)/transpose(jvp())/closed_call/rematted_computation/tanh")}
  wb = bf16[64,32]{{1,0}} bitcast(w), {meta(bitcast_name)}
  again = f32[64,32]{{1,0}} convert(wb)
  gr = f32[4,32]{{1,0}} multiply(g, r), {meta("jit(loss)/transpose(jvp())/closed_call/mul")}
  dx = f32[4,64]{{1,0}} dot(gr, again), lhs_contracting_dims={{1}}, rhs_contracting_dims={{1}}, {backward}
  ROOT out = (f32[4,32]{{1,0}}, f32[4,64]{{1,0}}) tuple(t, dx)
}}
"""


def test_the_checkpoints_transpose_casting_a_weight_again_is_remat():
    # seed 20 (bf16 weights, scan(unroll=True), dots_saveable): the backward's dot reads its own
    # cast of the weight, in the other order, re-read by the checkpoint's transpose (`remat2`).
    from hloflops.accounting import account

    acc = account(hloparse.parse(_cast_twice("jit(loss)/transpose(jvp())/closed_call/remat2")), xla={"flops": 0.0})
    assert [r.total.flops for r in acc.rows if r.remat and r.name == "again"] == [64 * 32]
    assert not any(r.remat for r in acc.rows if r.name == "cast")  # the forward's cast is the model's


def test_a_second_cast_elsewhere_in_the_backward_is_not_remat():
    from hloflops.accounting import account

    acc = account(hloparse.parse(_cast_twice("jit(loss)/transpose(jvp())/closed_call/reshape")), xla={"flops": 0.0})
    assert not any(r.remat for r in acc.rows if r.opcode == "convert")


def test_a_weight_cast_only_the_checkpoints_transpose_reads_is_remat():
    # The bitcast may carry the weight's own name rather than `remat2`: the cast read only by
    # dots of the checkpoint's transpose is the checkpointed function's cast, done again.
    from hloflops.accounting import account

    text = _cast_twice("params['w']", "jit(loss)/transpose(jvp())/closed_call/checkpoint/dot_general")
    acc = account(hloparse.parse(text), xla={"flops": 0.0})
    assert [r.total.flops for r in acc.rows if r.remat and r.name == "again"] == [64 * 32]
    assert not any(r.remat for r in acc.rows if r.name == "cast")


def test_a_weight_cast_the_backward_reads_outside_a_checkpoint_is_not_remat():
    from hloflops.accounting import account

    acc = account(hloparse.parse(_cast_twice("params['w']")), xla={"flops": 0.0})
    assert not any(r.remat for r in acc.rows if r.opcode == "convert")


def test_a_weight_cast_fused_into_its_transposed_copy_is_not_remat():
    # base draw 77 (a whole-model checkpoint): the backward's dot reads the weight transposed;
    # the copy that transposes it, with the cast fused in, runs in the program without remat too.
    from hloflops.accounting import account

    text = _cast_twice("params['w']", "jit(loss)/transpose(jvp())/closed_call/checkpoint/dot_general")
    text = text.replace("again = f32[64,32]{1,0} convert(wb)",
                        "wide = f32[64,32]{1,0} convert(wb)\n"
                        "  turned = f32[32,64]{0,1} transpose(wide), dimensions={1,0}\n"
                        "  again = f32[32,64]{1,0} copy(turned)")
    text = text.replace("rhs_contracting_dims={1}, metadata", "rhs_contracting_dims={0}, metadata")
    acc = account(hloparse.parse(text), xla={"flops": 0.0})
    assert any(r.name == "wide" for r in acc.rows)
    assert not any(r.remat for r in acc.rows if r.opcode == "convert")


def test_a_weight_cast_the_checkpoints_transpose_copies_transposed_is_not_remat():
    # held-out base draw 151 (`dots_saveable`, its recompute reads no weight): the backward's dot
    # reads the weight slice the checkpoint's transpose re-read (`remat2`), cast and transposed
    # in one copy fusion; the program without remat builds that transposed copy, cast fused in,
    # for the same dot (convert +5,120 where it counted). The plain cast stays remat (above).
    from hloflops.accounting import account

    text = _cast_twice("jit(loss)/transpose(jvp())/closed_call/remat2")
    text = text.replace("again = f32[64,32]{1,0} convert(wb)",
                        "wide = f32[64,32]{1,0} convert(wb)\n"
                        "  turned = f32[32,64]{0,1} transpose(wide), dimensions={1,0}\n"
                        "  again = f32[32,64]{1,0} copy(turned)")
    text = text.replace("rhs_contracting_dims={1}, metadata", "rhs_contracting_dims={0}, metadata")
    acc = account(hloparse.parse(text), xla={"flops": 0.0})
    assert any(r.name == "wide" for r in acc.rows)
    assert not any(r.remat for r in acc.rows if r.opcode == "convert")
