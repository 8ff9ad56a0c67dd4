"""Which frame inputs a value reads (analysis/hloflops/remat/inputs.py) through a combined
all-reduce: XLA's all-reduce combiner puts independent all-reduces (a forward activation's, a
recompute's) into one variadic instruction, whose element i reduces operand i alone. Seen on TPU
draws 2 and 24 (a whole-model checkpoint under tensor parallelism), where the forward's matmuls
looked as if they read every parameter and no recompute paired with them."""

from __future__ import annotations

import hloparse
from hloflops.remat.inputs import FrameInputs

HLO = """HloModule combined

sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  p0 = f32[4] parameter(0)
  p1 = f32[4] parameter(1)
  p2 = f32[4] parameter(2)
  x = f32[4] multiply(p0, p1)
  y = f32[4] negate(p2)
  ar = (f32[4], f32[4]) all-reduce(x, y), replica_groups={}, to_apply=sum
  first = f32[4] get-tuple-element(ar), index=0
  second = f32[4] get-tuple-element(ar), index=1
  ROOT out = (f32[4], f32[4]) tuple(first, second)
}
"""


def test_an_element_of_a_combined_all_reduce_reads_only_its_own_operand():
    inputs = FrameInputs(hloparse.parse(HLO))
    assert inputs.of("main", "first") == {("param", 0), ("param", 1)}
    assert inputs.of("main", "second") == {("param", 2)}
    assert inputs.of("main", "ar") == {("param", 0), ("param", 1), ("param", 2)}
