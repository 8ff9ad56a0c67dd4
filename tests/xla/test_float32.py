"""hloflops.xla.float32 is numpy's float32 arithmetic (what XLA's cost analysis does in C++ floats),
computed without numpy: checked here against numpy itself on values of every kind it meets."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hloflops.xla import float32
from tests.conftest import SOURCE_PATH

# float32 values as the engine holds them: whole numbers as ints (counts, bytes, up to past float32's
# range), the rest as floats (halves, ratios, subnormals, inf, nan)
whole = st.one_of(st.integers(-2**30, 2**30), st.integers(-2**130, 2**130), st.integers(2**23, 2**26))
fractional = st.floats(width=32, allow_nan=True, allow_infinity=True)
value = st.one_of(whole, fractional.map(lambda f: float32._back(f)))


def numpy_f32(v: float | int) -> float:
    with np.errstate(over="ignore"):
        return float(np.float32(float(v)) if isinstance(v, int) else np.float32(v))


def same(ours: float | int, theirs: float) -> bool:
    return (math.isnan(ours) and math.isnan(theirs)) or (ours == theirs and type(ours) is (
        int if float(theirs).is_integer() else float))


@settings(max_examples=2000, deadline=None)
@given(value, value)
def test_add_and_mul_are_numpys_float32(a: float | int, b: float | int) -> None:
    a, b = float32.f32(a), float32.f32(b)
    with np.errstate(over="ignore", invalid="ignore"):
        assert same(float32.add(a, b), float(np.float32(numpy_f32(a)) + np.float32(numpy_f32(b))))
        assert same(float32.mul(a, b), float(np.float32(numpy_f32(a)) * np.float32(numpy_f32(b))))


@settings(max_examples=500, deadline=None)
@given(st.lists(value, max_size=40))
def test_running_sum_is_numpys_sequential_float32_sum(values: list) -> None:
    with np.errstate(over="ignore", invalid="ignore"):
        expected = float(np.add.accumulate(np.array(values, dtype=np.float64).astype(np.float32),
                                           dtype=np.float32)[-1]) if values else 0
    assert same(float32.running_sum(values), expected)


# sums as the engine's: mostly whole numbers, around the limits where rounding starts (2**24, 2**53, float32's range)
engine_values = st.one_of(st.integers(-2**25, 2**25), st.integers(2**52, 2**54), st.integers(2**127, 2**129),
                          st.integers(-2**60, 2**60), value)


@settings(max_examples=1000, deadline=None)
@given(st.lists(engine_values, max_size=60))
def test_running_sum_is_add_and_f32_value_by_value(values: list) -> None:
    """running_sum writes add and f32 out in its loop for ints: it is still their left fold."""
    expected = 0
    if values:
        expected = float32.f32(values[0])
        for v in values[1:]:
            expected = float32.add(expected, float32.f32(v))
    ours = float32.running_sum(values)
    assert (math.isnan(ours) and math.isnan(expected)) or (ours == expected and type(ours) is type(expected))


@given(st.one_of(st.integers(-2**129, 2**129), st.floats(allow_nan=False)))
def test_f32_is_numpys_conversion(v: float | int) -> None:
    assert same(float32.f32(v), numpy_f32(v))


def test_numpy_is_not_imported() -> None:
    """A module whose XLA sums leave float32's exact integers no longer imports numpy (~0.1 s)."""
    code = ("import sys; from hloflops.xla import float32 as f; "
            "f.running_sum([2**25 + 1, 0.5, float('inf'), 3]); f.mul(1.5, 2**100); f.f32(0.1); "
            "print('numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONPATH": SOURCE_PATH})
    assert out.stdout.strip() == "False", out.stderr
