"""A checkpointed value only the recompute stores (analysis/hloflops/remat/unstored_forward.py).

With remat the backward reads the recompute's copy of a block's output, so the forward need not
store it: TPU copies `x + c` (a residual sum over a saved matmul output) into each forward fusion
that reads it, the next matmul's and the next residual sum's. Without remat the backward reads
the forward's value, which the forward then stores once for all its readers: the second forward
copy runs because of remat (TPU draw 47, a nested remat conv net: add -8,192 after optimization).
Not where the forward stores the value itself, nor where it is computed from parameters alone
(the program without remat's backward builds such a value where it reads it)."""

from __future__ import annotations

import hloparse
from hloflops.remat import find_remat

# A TPU module (tiled layouts, TPU's backend_config): the rule is TPU's.
_T = "{1,0:T(8,128)}"
_LAYOUT = "{(" + ", ".join(["f32[8,16]" + _T, "f32[16,16]" + _T, "f32[16,16]" + _T, "f32[8,16]" + _T,
                            "f32[8,16]" + _T]) + ")->(" + \
    ", ".join(["f32[8,16]" + _T, "f32[8,16]" + _T, "f32[16,16]" + _T]) + ")}"

UNSTORED = """HloModule unstored, is_scheduled=true, entry_computation_layout=@L

matmul_0 {
  a0 = f32[8,16] parameter(0)
  a1 = f32[16,16] parameter(1)
  ROOT ad = f32[8,16] dot(a0, a1), @D, metadata={op_name="@F/block_0/dot_general"}
}

sum_nested {
  n0 = f32[8,16] parameter(0)
  n1 = f32[8,16] parameter(1)
  ROOT nv = f32[8,16] add(n0, n1), metadata={op_name="@F/block_0/add"}
}

matmul_1 {
  b0 = f32[8,16] parameter(0)
  b1 = f32[8,16] parameter(1)
  b2 = f32[16,16] parameter(2)
  bv = f32[8,16] fusion(b0, b1), kind=kLoop, calls=sum_nested
  ROOT bd = f32[8,16] dot(bv, b2), @D, metadata={op_name="@F/block_1/dot_general"}
}

sum_1 {
  s0 = f32[8,16] parameter(0)
  s1 = f32[8,16] parameter(1)
  s2 = f32[8,16] parameter(2)
  sv = f32[8,16] add(s0, s1), metadata={op_name="@F/block_0/add"}
  ROOT sw = f32[8,16] add(sv, s2), metadata={op_name="@F/block_1/add"}
}

sum_recomputed {
  r0 = f32[8,16] parameter(0)
  r1 = f32[8,16] parameter(1)
  rv = f32[8,16] add(r0, r1), metadata={op_name="@R/block_0/add"}
  ROOT rc = bf16[8,16] convert(rv)
}

ENTRY main {
  x = f32[8,16] parameter(0)
  w0 = f32[16,16] parameter(1)
  w1 = f32[16,16] parameter(2)
  dy = f32[8,16] parameter(3)
  e = f32[8,16] parameter(4)
  c = f32[8,16] fusion(x, w0), kind=kOutput, calls=matmul_0, backend_config={"scoped_memory_configs":[]}
  d = f32[8,16] fusion(x, c, w1), kind=kOutput, calls=matmul_1
  y = f32[8,16] fusion(x, c, d), kind=kLoop, calls=sum_1
  v = bf16[8,16] fusion(x, c), kind=kLoop, calls=sum_recomputed
  dw = f32[16,16] dot(v, dy), @G, metadata={op_name="@B/block_1/transpose"}
  ROOT out = (f32[8,16], f32[8,16], f32[16,16]) tuple(y, d, dw)
}
""".replace("@L", _LAYOUT)

# The forward stores the block's output itself (its own fusion's output, read by the next matmul).
STORED = UNSTORED.replace("  d = f32[8,16] fusion(x, c, w1), kind=kOutput, calls=matmul_1",
                          "  h = f32[8,16] fusion(x, c), kind=kLoop, calls=sum_nested\n"
                          '  d = f32[8,16] dot(h, w1), @D, metadata={op_name="@F/block_1/dot_general"}')

# The value reads parameters alone (`x + e`, no stored matmul output).
OF_PARAMETERS = UNSTORED.replace("fusion(x, c, w1)", "fusion(x, e, w1)").replace(
    "fusion(x, c, d)", "fusion(x, e, d)").replace("fusion(x, c), kind=kLoop, calls=sum_recomputed",
                                                  "fusion(x, e), kind=kLoop, calls=sum_recomputed")


def _parsed(text: str):
    """The module, its op_name prefixes written out: @F the forward, @R the checkpoint's
    recompute, @B its backward; @D a matmul's dimension numbers, @G a weight gradient's."""
    for short, long in (("@R", "jit(loss)/transpose(jvp(ConvNet))/jvp(ConvNet)/checkpoint/rematted_computation/stack"),
                        ("@B", "jit(loss)/transpose(jvp(ConvNet))/jvp(ConvNet)/checkpoint/stack"),
                        ("@F", "jit(loss)/jvp(ConvNet)/stack/checkpoint"),
                        ("@D", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
                        ("@G", "lhs_contracting_dims={0}, rhs_contracting_dims={0}")):
        text = text.replace(short, long)
    return hloparse.parse(text)


def _forward_copies(text: str) -> set[tuple[str, str]]:
    return find_remat(_parsed(text)).remat & {("sum_nested", "nv"), ("sum_1", "sv")}


def test_a_value_only_the_recompute_stores_is_recompute_in_the_forwards_second_copy():
    index = find_remat(_parsed(UNSTORED))
    assert ("sum_recomputed", "rv") in index
    assert len(_forward_copies(UNSTORED)) == 1
    assert ("sum_1", "sw") not in index  # the next block's own sum: model FLOPs
    assert _forward_copies(UNSTORED) <= index.weak  # it rests on how XLA fused the program without remat


def test_the_forwards_copies_are_model_work_where_the_forward_stores_the_value():
    assert not _forward_copies(STORED)


def test_the_forwards_copies_are_model_work_where_the_value_reads_parameters_alone():
    assert not _forward_copies(OF_PARAMETERS)
