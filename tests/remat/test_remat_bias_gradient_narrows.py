"""A gradient only matmuls read, whose bias gradient this program sums in a reduce of its own: the
program without remat may merge the reduce into the fusion computing the gradient and narrow the
gradient to bf16 there for its matmuls (analysis/hloflops/remat/bias_gradient_narrows.py).

Held-out TPU draws ntpu 149 (haiku loop of tanh MLPs) and 161 (nnx loop of relu MLPs), policy
none: the first layer's output gradient `g` (`[8, 128]`, `[16, 32]`) is read by its bias
gradient's bare reduce and by two matmul fusions (its weight and input gradients); the program
without remat sums the bias gradient in the fusion computing `g` and hands `g` out narrowed, one
convert this program never runs (convert -1,024 and -512 below anything a split of its ops
reaches: out of range). Other draws of the same structure here keep `g` wide in their twin too
(TPU 4, 9, 50), so the narrow is a hinge that lowers the low end only. The unit tests use a small
hand-written TPU module (tiled layouts, TPU's backend config)."""

from __future__ import annotations

import hloparse
from hloflops.accounting import account

_REMAT = "jit(loss)/transpose(jvp(jvp()))/checkpoint/rematted_computation/linear/dot_general"
_GRADIENT = "jit(loss)/transpose(jvp(jvp()))/checkpoint/linear_1"

MODULE = """HloModule bias_narrow, is_scheduled=true, entry_computation_layout=@L

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

forward {
  p0 = f32[8,32] parameter(0)
  p1 = f32[32,32] parameter(1)
  ROOT h = f32[8,32] convolution(p0, p1), dim_labels=bf_io->bf, metadata={op_name="jit(loss)/jvp(linear)/dot_general"}
}

recompute {
  p0 = f32[8,32] parameter(0)
  p1 = f32[32,32] parameter(1)
  ROOT h = f32[8,32] convolution(p0, p1), dim_labels=bf_io->bf, metadata={op_name="@R"}
}

output_grad {
  q0 = f32[8,32] parameter(0)
  q1 = f32[32,32] parameter(1)
  q2 = f32[8,32] parameter(2)
  c = f32[8,32] convolution(q0, q1), dim_labels=bf_oi->bf, metadata={op_name="@G/dot_general"}
  ROOT g = f32[8,32] add(c, q2), metadata={op_name="@G/add_any"}
}

view {
  v0 = f32[8,32] parameter(0)
  ROOT v = f32[8,32] bitcast(v0)
}

weight_grad {
  s0 = f32[8,32] parameter(0)
  s1 = f32[8,32] parameter(1)
  a = f32[8,32] fusion(s1), kind=kLoop, calls=view
  ROOT dw = f32[32,32] convolution(s0, a), dim_labels=fb_io->bf, metadata={op_name="@G/dot_general"}
}

input_grad {
  t0 = f32[8,32] parameter(0)
  t1 = f32[32,32] parameter(1)
  a = f32[8,32] fusion(t0), kind=kLoop, calls=view
  @INPUT_GRAD
}

ENTRY main {
  x = f32[8,32] parameter(0)
  w = f32[32,32] parameter(1)
  dy = f32[8,32] parameter(2)
  h = f32[8,32] fusion(x, w), kind=kOutput, calls=forward, @T
  r = f32[8,32] fusion(x, w), kind=kOutput, calls=recompute, metadata={op_name="@R"}
  g = f32[8,32] fusion(dy, w, r), kind=kOutput, calls=output_grad, metadata={op_name="@G/dot_general"}
  zero = f32[] constant(0)
  db = f32[32] reduce(g, zero), dimensions={0}, to_apply=add, metadata={op_name="@G/reduce_sum"}
  dw = f32[32,32] fusion(x, g), kind=kOutput, calls=weight_grad, metadata={op_name="@G/dot_general"}
  @READERS
}
"""

_MATMUL = ('ROOT dx = f32[8,32] convolution(a, t1), dim_labels=bf_oi->bf, metadata={op_name="@G/dot_general"}')
# The input gradient's fusion adds `g` itself too (a residual's gradient): it reads `g` wide.
_RESIDUAL = (_MATMUL.replace("ROOT dx", "c") +
             '\n  ROOT dx = f32[8,32] add(c, t0), metadata={op_name="@G/add_any"}')
_TWO_READERS = """dx = f32[8,32] fusion(g, w), kind=kOutput, calls=input_grad, metadata={op_name="@G/dot_general"}
  ROOT out = (f32[8,32], f32[32], f32[32,32], f32[8,32]) tuple(h, db, dw, dx)"""
_ONE_READER = "ROOT out = (f32[8,32], f32[32], f32[32,32]) tuple(h, db, dw)"


def _account(input_grad: str = _MATMUL, readers: str = _TWO_READERS):
    text = MODULE
    for short, long in (("@INPUT_GRAD", input_grad), ("@READERS", readers), ("@R", _REMAT), ("@G", _GRADIENT),
                        # a TPU module: tiled layouts, TPU's backend config
                        ("@L", "{(f32[8,32]{1,0:T(8,128)})->f32[32]{0:T(128)}}"),
                        ("@T", 'backend_config={"scoped_memory_configs":[]}')):
        text = text.replace(short, long)
    return account(hloparse.parse(text), xla={"flops": 0.0})


def _narrows(acc) -> list[tuple[str, str, int]]:
    return [(h.computation, h.name, h.flops) for h in acc.remat_hinges if h.opcode == "convert"]


def test_gradient_read_only_by_matmuls_is_a_narrow_hinge():
    # `g` (256 elements) read by its bias gradient's bare reduce and two matmul fusions: the twin may
    # narrow it once beside a merged reduce, lowering the low end by 256; the split keeps its count.
    acc = _account()
    assert _narrows(acc) == [("output_grad", "g", 256)], acc.remat_hinges
    low, high = acc.remat_flops_bounds
    assert (low, high) == (acc.remat_flops - 256, acc.remat_flops), acc.remat_flops_bounds


def test_gradient_a_residual_add_reads_is_not():
    # Read wide by the residual's add in the input gradient's fusion: the twin keeps it wide.
    assert _narrows(_account(input_grad=_RESIDUAL)) == []


def test_gradient_one_matmul_reads_is_not():
    # One matmul reader: a narrow would fuse into it (TPU draw 167, exact).
    assert _narrows(_account(readers=_ONE_READER)) == []
