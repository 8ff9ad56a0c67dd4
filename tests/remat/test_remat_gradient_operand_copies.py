"""A recompute of a cheap activation nested in a backward matmul's fusion as its operand, whose
forward value this program stores (analysis/hloflops/remat/gradient_operand_copies.py).

Held-out TPU draw ntpu 159 (haiku loop, mlp, FSDP, save_only_these_names): each layer's weight
gradient nests `max(z, 0)` and its narrow to bf16 before the matmul, reading the saved `z`. The
program without remat does the same in its gradient fusion (it duplicates the forward's relu from
the `z` it stores rather than read the stored relu), so both copies are model FLOPs there (maximum
+768, convert +768 over-counted, the truth 1,053 under the low end). Nothing here tells whether
the twin duplicates or reads: a `twin_copies` hinge of one on each counted op of the copy lowers
the low end. The unit tests use a small hand-written TPU module (tiled layouts, TPU's backend
config); the replay is skipped without libtpu, as tests/remat/test_remat_tpu_generated.py."""

from __future__ import annotations

import pytest

import hloparse
from hloflops.accounting import account

_REMAT = "jit(loss)/transpose(jvp(jvp()))/checkpoint/rematted_computation/jit(relu)"
_GRADIENT = "jit(loss)/transpose(jvp(jvp()))/checkpoint/linear_5/dot_general"

MODULE = """HloModule relu_copy, is_scheduled=true, entry_computation_layout=@L

forward_relu {
  p0 = f32[4,64] parameter(0)
  p1 = f32[64] parameter(1)
  b = f32[4,64] broadcast(p1), dimensions={1}
  z = f32[4,64] add(p0, b), metadata={op_name="jit(loss)/jvp(linear_4)/add"}
  zero = f32[] constant(0)
  zb = f32[4,64] broadcast(zero), dimensions={}
  y = f32[4,64] @ACT(z@ZB), metadata={op_name="jit(loss)/jvp()/jit(relu)/@NAME"}
  @OUT
}

relu_copy {
  q0 = f32[4,64] parameter(0)
  zero = f32[] constant(0)
  zb = f32[4,64] broadcast(zero), dimensions={}
  r = f32[4,64] @ACT(q0@ZB), metadata={op_name="@R/@NAME"}
  ROOT n = bf16[4,64] convert(r)
}

weight_grad {
  s0 = f32[4,16] parameter(0)
  s1 = f32[4,64] parameter(1)
  a = bf16[4,64] fusion(s1), kind=kLoop, calls=relu_copy, metadata={op_name="@R/@NAME"}
  g = bf16[4,16] convert(s0)
  ROOT dw = f32[64,16] convolution(a, g), dim_labels=fb_io->bf, metadata={op_name="@G"}
}

ENTRY main {
  x = f32[4,64] parameter(0)
  bias = f32[64] parameter(1)
  dy = f32[4,16] parameter(2)
  f = (f32[1,4,64], f32[4,64]) fusion(x, bias), kind=kLoop, calls=forward_relu, @T
  y = f32[1,4,64] get-tuple-element(f), index=0
  z = f32[4,64] get-tuple-element(f), index=1
  dw = f32[64,16] fusion(dy, z), kind=kOutput, calls=weight_grad, metadata={op_name="@G"}
  ROOT out = (f32[1,4,64], f32[64,16]) tuple(y, dw)
}
"""

_STORED = """yb = f32[1,4,64] bitcast(y)
  ROOT out = (f32[1,4,64], f32[4,64]) tuple(yb, z)"""
# The forward's relu read inside its fusion only (its square handed out): no stored relu to read.
_UNSTORED = """m = f32[4,64] multiply(y, y), metadata={op_name="jit(loss)/jvp()/mul"}
  mb = f32[1,4,64] bitcast(m)
  ROOT out = (f32[1,4,64], f32[4,64]) tuple(mb, z)"""

_ZERO = "zb = f32[4,64] broadcast(zero), dimensions={}"
_FLOOR = (
    (f"{_ZERO}\n  y", "zb = f32[4,64] broadcast(p1), dimensions={1}\n  y"),
    (f"q0 = f32[4,64] parameter(0)\n  zero = f32[] constant(0)\n  {_ZERO}",
     "q0 = f32[4,64] parameter(0)\n  q1 = f32[64] parameter(1)\n  zb = f32[4,64] broadcast(q1), dimensions={1}"),
    ("fusion(s1), kind=kLoop", "fusion(s1, s2), kind=kLoop"),
    ("s1 = f32[4,64] parameter(1)\n", "s1 = f32[4,64] parameter(1)\n  s2 = f32[64] parameter(2)\n"),
    ("fusion(dy, z), kind=kOutput", "fusion(dy, z, bias), kind=kOutput"),
)


def _account(out: str = _STORED, act: str = "maximum", name: str = "max", floor: bool = False):
    text = MODULE
    if floor:  # the activation's floor a bias (a second input of the copy), not a constant
        for short, long in _FLOOR:
            assert short in text, short
            text = text.replace(short, long)
    for short, long in (("@OUT", out), ("@ACT", act), ("@ZB", ", zb" if act == "maximum" else ""),
                        ("@NAME", name), ("@R", _REMAT), ("@G", _GRADIENT),
                        # a TPU module: tiled layouts, TPU's backend config
                        ("@L", "{(f32[4,16]{1,0:T(4,128)})->f32[64,16]{0,1:T(8,128)}}"),
                        ("@T", 'backend_config={"scoped_memory_configs":[]}')):
        text = text.replace(short, long)
    return account(hloparse.parse(text), xla={"flops": 0.0})


def test_relu_copy_in_the_weight_gradient_is_a_hinge_of_one():
    # Counted (the recompute's relu equals the forward's), but the twin may duplicate the relu into
    # its own gradient fusion: the low end drops by the copy and its narrow, the count stays.
    acc = _account()
    assert acc.remat_flops == 512
    assert acc.remat_flops_bounds == (0, 512)
    # The narrow `n`, unnamed, pairs with itself by signature, and nothing in the forward stores a
    # narrow of the relu or reads it wide: a weak pairing (hloflops.remat.stored_forward_narrows), a
    # hinge of its whole count already, as sure as the copy's hinge of one.
    assert {(h.computation, h.name, h.twin_copies) for h in acc.remat_hinges} == {
        ("relu_copy", "r", 1), ("relu_copy", "n", 0)}


def test_a_forward_value_the_program_does_not_store_is_not():
    # The forward hands out no relu: the program without remat has no stored value to read instead
    # and would rebuild it too; this rule leaves the count to the others.
    acc = _account(_UNSTORED)
    assert acc.remat_flops == 512
    assert not any(h.twin_copies for h in acc.remat_hinges), acc.remat_hinges


def test_a_copy_reading_more_than_it_writes_is_not():
    # max(z, b) with a broadcast bias as its floor: the copy reads z and b, more than the value it
    # writes, and XLA duplicates such a producer only where every consumer can fuse it.
    acc = _account(floor=True)
    assert acc.remat_flops == 512
    assert not any(h.twin_copies for h in acc.remat_hinges), acc.remat_hinges


def test_an_expensive_activation_is_never_duplicated():
    # XLA never duplicates an expensive op (tanh) into a consumer: its copy here is a recompute.
    acc = _account(act="tanh", name="tanh")
    assert acc.remat_flops == 256  # the narrow: tanh runs transcendentals, no FLOPs
    assert not any(h.twin_copies for h in acc.remat_hinges), acc.remat_hinges


@pytest.mark.parametrize("seed", [159])
def test_tpu_draw_whose_twin_duplicates_the_relu_is_in_range(seed, monkeypatch):
    # Before the rule the truth (4,707) lay 1,053 under the low end (5,760).
    pytest.importorskip("jax")
    pytest.importorskip("libtpu", reason="libtpu is not installed: no TPU compiler to build the programs with")
    from tests.remat.generator import check, draw
    monkeypatch.setenv("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    outcome = check(draw(seed, "tpu"))
    assert outcome.in_bounds("after"), outcome.describe()
    assert outcome.all_ok("before"), outcome.describe()
