"""A stored forward value numbered apart from its recompute's copies only by unit dimensions
(hloflops.remat.unit_free_values), and a recompute fusion materializing a value the forward only
writes transposed (hloflops.remat.natural_layouts), after optimization.

A layer norm's recompute takes `rsqrt` of a `[b, t, 1]` bitcast of the variance where the forward
takes it of the `[b, t]` sums, so everything computed from it (the attention over the normalized
input, the residual sum `x + attn @ wo`) is a value of its own to the pairing's numbering. The
forward stores that residual sum, so the program without remat reads it stored in its gradient
fusions: every recompute copy of it is remat (base seeds 105 and 136 missed add -8,192 and
-16,384: eight copies in gradient fusions taken for the program without remat's own).

An attention key `x @ w + b` read transposed by the scores and as it is by the query's gradient is
copied by XLA into one fusion per layout; the program without remat builds both in its forward.
Where the forward with remat writes only the transposed one and the recompute's copy of that was
merged into it, the recompute's fusion handing the key out as it is stands in for the program
without remat's own (base seeds 8 and 278 over-counted add +4,096 and +16,384)."""

from __future__ import annotations

import hloparse
import pytest

from hloflops.remat.unit_free_values import UnitFree

_MODULE = """HloModule m, is_scheduled=true

%fused_a (p0: f32[4,32]) -> f32[4,32,16] {
  %p0 = f32[4,32]{1,0} parameter(0)
  %r = f32[4,32]{1,0} rsqrt(%p0)
  %b = f32[4,32,16]{2,1,0} broadcast(%r), dimensions={0,1}
  ROOT %e = f32[4,32,16]{2,1,0} exponential(%b)
}

%fused_b (q0: f32[4,32]) -> f32[4,32,16] {
  %q0 = f32[4,32]{1,0} parameter(0)
  %v = f32[4,32,1]{2,1,0} bitcast(%q0)
  %r1 = f32[4,32,1]{2,1,0} rsqrt(%v)
  %w = f32[4,32]{1,0} bitcast(%r1)
  %b1 = f32[4,32,16]{2,1,0} broadcast(%w), dimensions={0,1}
  ROOT %e1 = f32[4,32,16]{2,1,0} exponential(%b1)
}

ENTRY %main (x: f32[4,32]) -> (f32[4,32,16], f32[4,32,16], f32[4,32]) {
  %x = f32[4,32]{1,0} parameter(0)
  %fa = f32[4,32,16]{2,1,0} fusion(%x), kind=kLoop, calls=%fused_a
  %fb = f32[4,32,16]{2,1,0} fusion(%x), kind=kLoop, calls=%fused_b
  %n = f32[4,32]{1,0} negate(%x)
  ROOT %t = (f32[4,32,16]{2,1,0}, f32[4,32,16]{2,1,0}, f32[4,32]{1,0}) tuple(%fa, %fb, %n)
}
"""


def test_unit_dimension_views_leave_the_value_as_it_is():
    numbers = UnitFree(hloparse.parse(_MODULE))
    assert numbers.of("fused_b", "r1") == numbers.of("fused_a", "r")  # rsqrt of [4,32,1] and of [4,32]
    assert numbers.of("fused_b", "e1") == numbers.of("fused_a", "e")
    assert numbers.of("main", "fb") == numbers.of("main", "fa")
    assert numbers.of("main", "n") != numbers.of("main", "x")


pytest.importorskip("jax")
pytest.importorskip("flax")

from tests.remat.generator import check, draw  # noqa: E402
from tests.remat.judge import LOOP_TOLERANCE  # noqa: E402


def _exact_add(seed: int) -> None:
    outcome = check(draw(seed, "base"))
    after = outcome._at("after")
    slack = LOOP_TOLERANCE * after.loops  # add counts loops: 64 FLOPs a loop
    assert abs(after.misses.get("add", 0)) <= slack, outcome.describe()
    assert outcome.in_bounds("after"), outcome.describe()
    assert outcome.all_ok("before"), outcome.describe()


@pytest.mark.parametrize("seed", [105, 136])  # Python loops of attention layers: add -8,192, -16,384 before
def test_stored_residual_sum_numbered_apart_by_unit_dimensions_is_recomputed_in_gradient_fusions(seed):
    _exact_add(seed)


@pytest.mark.parametrize("seed", [8, 278])  # cross attention's key (encoder-decoder), self attention's (nested LM)
def test_recompute_materializing_a_value_the_forward_only_lays_out_stands_in_for_the_twins(seed):
    _exact_add(seed)
