"""Softmax probabilities recomputed in a backward loop whose forward this program does not store
(analysis/hloflops/remat/unstored_probabilities.py).

TPU draws utpu 183 and 201 (hk.layer_stack attention, tensor parallel, dots_saveable): the
recompute's `e / s` pairs with the forward's in the other loop body and counts as remat (divide
+6,144 and +262,144), but the program without remat, which stores `p`, computes it twice in its
forward (for `p @ v` and for the stack): the truth is 0. On fourteen other draws with the same sign
(tpu 1, 10, 29, 49; htpu 71, 82, 85, 112; ntpu 133, 135; utpu 205, 214, 215, 234) it computes `p`
once and the count is right. So a hinge of one copy, never a sure share. A small hand-written TPU
module: a forward loop whose `p @ v` fusion nests the probabilities, a backward loop whose `dv`
fusion nests their recompute."""

from __future__ import annotations

import hloparse
from hloflops.accounting import account

_F = "jit(loss)/jvp()/while/body/closed_call/multi_head_attention"
_B = ("jit(loss)/transpose(jvp())/while/body/closed_call/checkpoint/rematted_computation/"
      "multi_head_attention")
_LOOP = "(s32[], f32[2,8,8], f32[2,8], f32[2,8], f32[2,8,8])"  # a loop's state
_DIMS = "lhs_batch_dims={{0}}, rhs_batch_dims={{0}}, lhs_contracting_dims={{{}}}, rhs_contracting_dims={{1}}"
_G = "jit(loss)/transpose(jvp())/while/body/closed_call/checkpoint/multi_head_attention/dot_general"

MODULE = """HloModule softmax, is_scheduled=true, entry_computation_layout=@L

fwd_pv {
  x = f32[2,8,8] parameter(0)
  m = f32[2,8] parameter(1)
  s = f32[2,8] parameter(2)
  v = f32[2,8,8] parameter(3)
  p = f32[2,8,8] fusion(x, m, s), kind=kLoop, calls=probs.f
  ROOT o = f32[2,8,8] dot(p, v), @DF, metadata={op_name="@F/dot_general"}
}

probs.f {
  x = f32[2,8,8] parameter(0)
  m = f32[2,8] parameter(1)
  s = f32[2,8] parameter(2)
  mb = f32[2,8,8] broadcast(m), dimensions={0,1}
  d = f32[2,8,8] subtract(x, mb), metadata={op_name="@F/sub"}
  e = f32[2,8,8] exponential(d), metadata={op_name="@F/exp"}
  sb = f32[2,8,8] broadcast(s), dimensions={0,1}
  ROOT p = f32[2,8,8] divide(e, sb), metadata={op_name="@F/div"}
}

probs.b {
  x = f32[2,8,8] parameter(0)
  m = f32[2,8] parameter(1)
  s = f32[2,8] parameter(2)
  mb = f32[2,8,8] broadcast(m), dimensions={0,1}
  d = f32[2,8,8] subtract(x, mb), metadata={op_name="@B/sub"}
  e = f32[2,8,8] exponential(d), metadata={op_name="@B/exp"}
  sb = f32[2,8,8] broadcast(s), dimensions={0,1}
  ROOT p = f32[2,8,8] divide(e, sb), metadata={op_name="@B/div"}
}

bwd_dv {
  x = f32[2,8,8] parameter(0)
  m = f32[2,8] parameter(1)
  s = f32[2,8] parameter(2)
  g = f32[2,8,8] parameter(3)
  p = f32[2,8,8] fusion(x, m, s), kind=kLoop, calls=probs.b
  ROOT dv = f32[2,8,8] dot(p, g), @DB, metadata={op_name="@G"}
}

fwd_body {
  t = @T5 parameter(0)
  i = s32[] get-tuple-element(t), index=0
  x = f32[2,8,8] get-tuple-element(t), index=1
  m = f32[2,8] get-tuple-element(t), index=2
  s = f32[2,8] get-tuple-element(t), index=3
  v = f32[2,8,8] get-tuple-element(t), index=4
  o = f32[2,8,8] fusion(x, m, s, v), kind=kOutput, calls=fwd_pv, metadata={op_name="@F/dot_general"}, @TPU
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT r = @T5 tuple(j, o, m, s, v)
}

bwd_body {
  t = @T5 parameter(0)
  i = s32[] get-tuple-element(t), index=0
  x = f32[2,8,8] get-tuple-element(t), index=1
  m = f32[2,8] get-tuple-element(t), index=2
  s = f32[2,8] get-tuple-element(t), index=3
  g = f32[2,8,8] get-tuple-element(t), index=4
  dv = f32[2,8,8] fusion(x, m, s, g), kind=kOutput, calls=bwd_dv, metadata={op_name="@G"}
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT r = @T5 tuple(j, dv, m, s, g)
}

cond {
  t = @T5 parameter(0)
  i = s32[] get-tuple-element(t), index=0
  n = s32[] constant(3)
  ROOT c = pred[] compare(i, n), direction=LT
}

cond.1 {
  t = @T5 parameter(0)
  i = s32[] get-tuple-element(t), index=0
  n = s32[] constant(3)
  ROOT c = pred[] compare(i, n), direction=LT
}

ENTRY main {
  x = f32[2,8,8] parameter(0)
  m = f32[2,8] parameter(1)
  s = f32[2,8] parameter(2)
  v = f32[2,8,8] parameter(3)
  zero = s32[] constant(0)
  t0 = @T5 tuple(zero, x, m, s, v)
  w0 = @T5 while(t0), condition=cond, body=fwd_body, backend_config={"known_trip_count":{"n":"3"}}
  o = f32[2,8,8] get-tuple-element(w0), index=1
  t1 = @T5 tuple(zero, o, m, s, v)
  w1 = @T5 while(t1), condition=cond.1, body=bwd_body, backend_config={"known_trip_count":{"n":"3"}}
  ROOT dv = f32[2,8,8] get-tuple-element(w1), index=1
}
"""

# The forward's `p @ v` fusion hands `p` out too, and the loop carries it: this program stores `p`.
_STORES = (
    ("ROOT o = f32[2,8,8] dot(p, v)", "o = f32[2,8,8] dot(p, v)"),
    ('@DF, metadata={op_name="@F/dot_general"}\n}',
     '@DF, metadata={op_name="@F/dot_general"}\n  ROOT r = (f32[2,8,8], f32[2,8,8]) tuple(o, p)\n}'),
    ("o = f32[2,8,8] fusion(x, m, s, v)", "f = (f32[2,8,8], f32[2,8,8]) fusion(x, m, s, v)"),
    ("  one = s32[] constant(1)\n  j = s32[] add(i, one)\n  ROOT r = @T5 tuple(j, o, m, s, v)",
     "  o = f32[2,8,8] get-tuple-element(f), index=0\n  p = f32[2,8,8] get-tuple-element(f), index=1\n"
     "  one = s32[] constant(1)\n  j = s32[] add(i, one)\n"
     "  ROOT r = @T5 tuple(j, o, m, s, p)"),
)


def _account(stores: bool = False, dividend: str = "e"):
    text = MODULE
    if stores:
        for short, long in _STORES:
            assert short in text, short
            text = text.replace(short, long)
    if dividend != "e":  # a divide of something else than the exponential (not softmax's `e / s`)
        short = "ROOT p = f32[2,8,8] divide(e, sb), metadata={op_name=\"@B/div\"}"
        assert short in text
        text = text.replace(short, short.replace("divide(e,", f"divide({dividend},"))
    for short, long in (("@F", _F), ("@B", _B), ("@G", _G), ("@T5", _LOOP), ("@DF", _DIMS.format(2)),
                        ("@DB", _DIMS.format(1)),
                        # a TPU module: tiled layouts, TPU's backend config
                        ("@L", "{(f32[2,8,8]{2,1,0:T(8,128)})->f32[2,8,8]{2,1,0:T(8,128)}}"),
                        ("@TPU", 'backend_config={"scoped_memory_configs":[]}')):
        text = text.replace(short, long)
    return account(hloparse.parse(text), xla={"flops": 0.0})


def test_recomputed_probabilities_the_forward_does_not_store_are_a_hinge_of_one():
    # Counted (the recompute's `e / s` pairs with the forward's), but the program without remat
    # stores `p` and may compute it twice in its forward: the low end drops by one copy.
    acc = _account()
    assert acc.remat_flops == 384  # the divide (the subtract is left unsure: the high end)
    assert acc.remat_flops_bounds == (0, 768)  # (384, 768) before the rule
    assert [(h.computation, h.name, h.twin_copies) for h in acc.remat_hinges if h.twin_copies] == [
        ("probs.b", "p", 1)]


def test_probabilities_the_forward_stores_are_not():
    # This program's forward stores `p` as the program without remat does: nothing to copy more.
    acc = _account(stores=True)
    assert not any(h.twin_copies for h in acc.remat_hinges), acc.remat_hinges


def test_a_divide_of_no_exponential_is_not():
    # Not softmax's probabilities: left to the other rules.
    acc = _account(dividend="d")
    assert not any(h.twin_copies for h in acc.remat_hinges), acc.remat_hinges
