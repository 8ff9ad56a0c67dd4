"""The forward's narrow of an activation nested whole, matmul and all, in the next matmul's fusion
(analysis/hloflops/remat/nested_forward_narrows.py). A checkpointed layer's forward stores nothing
of its first matmul and activation, so TPU nests both in the fusion of the next matmul and narrows
the activation `x * tanh(x)` to bf16 for it (`inner`'s unnamed convert `c`). The program without
remat stores the first matmul's output `x` for its backward (the derivative reads it) and its next
matmul's fusion reads the stored value wide, narrowing nothing (TPU draws 48 and 1: convert -16,384 and
-2,097,152 after optimization): the narrow is remat."""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat

HLO = """HloModule nested_forward, is_scheduled=true, entry_computation_layout=@L

inner {
  i0 = f32[8,16] parameter(0)
  i1 = f32[16,32] parameter(1)
  d = f32[8,32] dot(i0, i1), @D, metadata={op_name="@F/linear/dot_general"}
  t = f32[8,32] tanh(d), metadata={op_name="@F/tanh"}
  a = f32[8,32] multiply(d, t), metadata={op_name="@F/mul"}
  ROOT c = bf16[8,32] convert(a)
}

outer {
  o0 = f32[8,16] parameter(0)
  o1 = f32[16,32] parameter(1)
  o2 = bf16[32,4] parameter(2)
  h = bf16[8,32] fusion(o0, o1), kind=kOutput, calls=inner
  ROOT y = f32[8,4] dot(h, o2), @D, metadata={op_name="@F/linear_1/dot_general"}
}

recompute {
  r0 = f32[8,16] parameter(0)
  r1 = f32[16,32] parameter(1)
  r2 = f32[8,32] parameter(2)
  d.r = f32[8,32] dot(r0, r1), @D, metadata={op_name="@R/linear/dot_general"}
  t.r = f32[8,32] tanh(d.r), metadata={op_name="@R/tanh"}
  ROOT g = f32[8,32] multiply(t.r, r2), metadata={op_name="@B/mul"}
}

ENTRY main {
  x = f32[8,16] parameter(0)
  w = f32[16,32] parameter(1)
  v = bf16[32,4] parameter(2)
  ct = f32[8,32] parameter(3)
  y = f32[8,4] fusion(x, w, v), kind=kOutput, calls=outer, @T
  g = f32[8,32] fusion(x, w, ct), kind=kOutput, calls=recompute
  ROOT out = (f32[8,4], f32[8,32]) tuple(y, g)
}
"""


def _parsed(text: str):
    """@F the forward, @R the checkpoint's recompute, @B its backward; @D a matmul's dimensions;
    @L the entry's layout and @T TPU's backend config (what makes it a TPU module)."""
    for short, long in (("@D", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
                        ("@R", "jit(loss)/transpose(jvp())/checkpoint/rematted_computation"),
                        ("@B", "jit(loss)/transpose(jvp())/checkpoint"), ("@F", "jit(loss)/jvp()"),
                        ("@L", "{(f32[8,16]{1,0:T(8,128)})->f32[8,4]{1,0:T(8,128)}}"),
                        ("@T", 'backend_config={"scoped_memory_configs":[]}')):
        text = text.replace(short, long)
    return hloparse.parse(text)


def test_a_forward_narrow_of_an_activation_nested_with_its_matmul_is_remat():
    index = find_remat(_parsed(HLO))
    assert ("recompute", "d.r") in index and ("inner", "d") not in index
    assert ("inner", "c") in index
    assert ("inner", "c") not in index.unsure


STORED = HLO.replace("""inner {
  i0 = f32[8,16] parameter(0)
  i1 = f32[16,32] parameter(1)
  d = f32[8,32] dot(i0, i1), @D, metadata={op_name="@F/linear/dot_general"}
  t = f32[8,32] tanh(d), metadata={op_name="@F/tanh"}
  a = f32[8,32] multiply(d, t), metadata={op_name="@F/mul"}
""", """first {
  f0 = f32[8,16] parameter(0)
  f1 = f32[16,32] parameter(1)
  ROOT d = f32[8,32] dot(f0, f1), @D, metadata={op_name="@F/linear/dot_general"}
}

inner {
  i0 = f32[8,32] parameter(0)
  t = f32[8,32] tanh(i0), metadata={op_name="@F/tanh"}
  a = f32[8,32] multiply(i0, t), metadata={op_name="@F/mul"}
""").replace("""  h = bf16[8,32] fusion(o0, o1), kind=kOutput, calls=inner""",
             """  h = bf16[8,32] fusion(o0), kind=kLoop, calls=inner""").replace(
    """  o0 = f32[8,16] parameter(0)
  o1 = f32[16,32] parameter(1)
  o2 = bf16[32,4] parameter(2)""", """  o0 = f32[8,32] parameter(0)
  o2 = bf16[32,4] parameter(1)""").replace("""  y = f32[8,4] fusion(x, w, v), kind=kOutput, calls=outer, @T""",
                 """  s = f32[8,32] fusion(x, w), kind=kOutput, calls=first, @T
  y = f32[8,4] fusion(s, v), kind=kOutput, calls=outer""")


def test_a_narrow_of_an_activation_read_from_the_stored_matmul_output_is_left_alone():
    # The forward stores the first matmul's output here: the program without remat's fusion too.
    index = find_remat(_parsed(STORED))
    assert ("recompute", "d.r") in index
    assert ("inner", "c") not in index


def test_a_narrow_of_a_chain_of_single_reads_is_left_alone():
    # `tanh(x)` alone: the program without remat saves its output, narrowed for the next matmul too.
    text = HLO.replace("""  a = f32[8,32] multiply(d, t), metadata={op_name="@F/mul"}
  ROOT c = bf16[8,32] convert(a)""", """  ROOT c = bf16[8,32] convert(t)""")
    index = find_remat(_parsed(text))
    assert ("recompute", "d.r") in index
    assert ("inner", "c") not in index
