"""The pairing's value numbering sees through unit dimensions (hloflops.remat.values,
hloflops.remat.views): a bitcast or reshape that only adds or drops size-1 dimensions is its
operand's value, and an elementwise op, a broadcast or a reduce over such a shape is numbered by
its unit-free form. XLA holds one value as `[b, t, d]` in one program part and `[1, b, t, d]` in
another (a layer norm's output stacked for a scan, a softmax's `[b, 1, q, k]` with its head
dimension), so a recompute and its forward numbered op by op would differ only by those
dimensions."""

from __future__ import annotations

import hloparse

from hloflops.remat.values import value_numbers

_RSQRT = """HloModule m, is_scheduled=true

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


_MODULE = """HloModule m, is_scheduled=true

ENTRY %main (x: f32[4,32], y: f32[4,32]) -> (f32[4,32,16], f32[1,4,32,16], f32[4,32], f32[1,4,32],
    f32[4,32,16]) {
  %x = f32[4,32]{1,0} parameter(0)
  %y = f32[4,32]{1,0} parameter(1)
  %s = f32[4,32]{1,0} add(%x, %y)
  %xu = f32[1,4,32]{2,1,0} bitcast(%x)
  %yu = f32[4,1,32]{2,1,0} reshape(%y)
  %yu2 = f32[1,4,32]{2,1,0} bitcast(%yu)
  %su = f32[1,4,32]{2,1,0} add(%xu, %yu2)
  %b = f32[4,32,16]{2,1,0} broadcast(%s), dimensions={0,1}
  %bu = f32[1,4,32,16]{3,2,1,0} broadcast(%su), dimensions={0,1,2}
  %e = f32[4,32,16]{2,1,0} exponential(%b)
  %eu = f32[1,4,32,16]{3,2,1,0} exponential(%bu)
  %zero = f32[] constant(0)
  %r = f32[4,32]{1,0} reduce(%e, %zero), dimensions={2}, to_apply=%sum
  %ru = f32[1,4,32]{2,1,0} reduce(%eu, %zero), dimensions={3}, to_apply=%sum
  %sl = f32[2,32]{1,0} slice(%r), slice={[0:2], [0:32]}
  %slu = f32[1,2,32]{2,1,0} slice(%ru), slice={[0:1], [0:2], [0:32]}
  %other = f32[32,4]{1,0} reshape(%s)
  %across = f32[4,32]{1,0} reduce(%e, %zero), dimensions={1}, to_apply=%sum
  %t = f32[32,16]{1,0} reduce(%e, %zero), dimensions={0}, to_apply=%sum
  %tu = f32[1,32,16]{2,1,0} reduce(%eu, %zero), dimensions={1}, to_apply=%sum
  %bt = f32[4,32,16]{2,1,0} broadcast(%s), dimensions={0,1}
  ROOT %out = (f32[4,32,16]{2,1,0}, f32[1,4,32,16]{3,2,1,0}, f32[4,32]{1,0}, f32[1,4,32]{2,1,0},
      f32[4,32,16]{2,1,0}) tuple(%e, %eu, %r, %ru, %bt)
}

%sum (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %c = f32[] add(%a, %b)
}
"""


def test_unit_dimension_views_and_the_ops_over_them_keep_the_value_number():
    exact = value_numbers(hloparse.parse(_MODULE)).exact
    number = lambda name: exact[("main", name)]  # noqa: E731
    assert number("xu") == number("x") and number("yu2") == number("yu") == number("y")
    assert number("su") == number("s")  # elementwise over [1, 4, 32] and [4, 32]
    assert number("bu") == number("b")  # broadcast to [1, 4, 32, 16] and [4, 32, 16]
    assert number("eu") == number("e")
    assert number("ru") == number("r")  # reduce over the last dimension of each
    assert number("tu") == number("t")
    assert number("slu") == number("sl")  # a view of one value taken in either shape


def test_views_and_reduces_that_move_elements_stay_apart():
    exact = value_numbers(hloparse.parse(_MODULE)).exact
    number = lambda name: exact[("main", name)]  # noqa: E731
    assert number("other") != number("s")  # [4, 32] read as [32, 4]: the same elements, another shape
    assert number("across") != number("r")  # [4, 32] either way, reduced over another dimension
    assert number("x") != number("y") and number("t") != number("r")


def test_a_unit_dimension_bitcast_under_an_rsqrt_leaves_the_value_and_all_computed_from_it():
    # a layer norm's recompute takes rsqrt of a [b, t, 1] bitcast of the variance, its forward of the [b, t] sums
    exact = value_numbers(hloparse.parse(_RSQRT)).exact
    assert exact[("fused_b", "r1")] == exact[("fused_a", "r")]
    assert exact[("fused_b", "e1")] == exact[("fused_a", "e")]
    assert exact[("main", "fb")] == exact[("main", "fa")]
    assert exact[("main", "n")] != exact[("main", "x")]
