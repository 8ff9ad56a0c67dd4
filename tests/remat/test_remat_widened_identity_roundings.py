"""jax marks a saveable residual with a reduce-precision to its own type's bits (an identity);
only the program with remat runs it (hloflops.remat.op_kinds.is_identity_rounding). TPU may
narrow the matmul's output to bf16 for a bf16 reader and keep the f32 rounding (8 exponent and 23
mantissa bits) on the bf16 value: more bits than the type holds, an identity all the same (TPU
draw 0 and held-out 93, `dots_saveable`: reduce-precision -18,432 and -8,192 before). A rounding
to fewer bits than the type's rounds; it is left alone."""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat
from hloflops.remat.op_kinds import is_identity_rounding

HLO = """HloModule widened_rounding, is_scheduled=true

ENTRY main {
  x = f32[8,64] parameter(0)
  w = f32[64,8] parameter(1)
  g = f32[8,8] parameter(2)
  h = bf16[8,8] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, \
metadata={op_name="jit(loss)/jvp()/Dense_0/dot_general"}, backend_config={"scoped_memory_configs":[]}
  r = bf16[8,8] reduce-precision(h), exponent_bits=@E, mantissa_bits=@M, \
metadata={op_name="jit(loss)/jvp()/Dense_0/reduce_precision"}
  t = bf16[8,8] tanh(r), metadata={op_name="jit(loss)/jvp()/tanh"}
  t.r = bf16[8,8] tanh(r), metadata={op_name="jit(loss)/transpose(jvp())/checkpoint/rematted_computation/tanh"}
  tw = f32[8,8] convert(t.r)
  m = f32[8,8] multiply(tw, g), metadata={op_name="jit(loss)/transpose(jvp())/checkpoint/mul"}
  ROOT out = (bf16[8,8], f32[8,8]) tuple(t, m)
}
"""


def _rounding(exponent: int, mantissa: int):
    module = hloparse.parse(HLO.replace("@E", str(exponent)).replace("@M", str(mantissa)))
    return module, module.entry.by_name["r"]


def test_a_bf16_rounding_to_f32_bits_is_an_identity():
    assert is_identity_rounding(_rounding(8, 23)[1])
    assert is_identity_rounding(_rounding(8, 7)[1])


def test_a_rounding_to_fewer_bits_than_the_type_is_not():
    assert not is_identity_rounding(_rounding(5, 23)[1])
    assert not is_identity_rounding(_rounding(8, 3)[1])


def test_the_saveable_marker_on_a_narrowed_matmul_output_is_remat():
    module, _ = _rounding(8, 23)
    assert ("main", "r") in find_remat(module)
