"""C++ `float` arithmetic on Python numbers, exactly as numpy's float32 would do it, but fast.

XLA's cost analysis keeps every value in a float32. A float32 value is held here as a Python
`int` when it is a whole number (almost always: counts and bytes) and as a Python `float`
otherwise (halves, utilization ratios, inf, nan). Integer arithmetic is exact, so an operation
on two ints is one exact result rounded once to 24 significant bits, half to even: what IEEE
float32 addition and multiplication give. Anything else is computed in double and rounded to
float32 once (C's double -> float cast, through struct): the sum or product of two float32 values
is exact in double or rounded there with no effect on the float32 result (53 >= 2 * 24 + 2 bits),
so this is numpy's float32 arithmetic without importing numpy (~0.1 s of a process's start).

`f32(count)` is numpy's `np.float32(count)`, which goes through a double first: for counts of
2**53 and more it rounds twice, and so do we.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from fractions import Fraction

Value = int | float
_F32 = struct.Struct("f")
_LIMIT = 2**128  # the first integer float32 cannot hold (it becomes inf)
_EXACT_IN_DOUBLE = 2**53
_EXACT = 2**24  # every integer up to this is a float32


def _round(n: int) -> Value:
    """The float32 nearest to the integer n (half to even)."""
    if -_EXACT_IN_DOUBLE < n < _EXACT_IN_DOUBLE:  # exact as a double: C's double -> float cast
        return int(_F32.unpack(_F32.pack(n))[0])
    m = -n if n < 0 else n
    bits = m.bit_length()
    if bits <= 24:
        return n
    shift = bits - 24
    q = m >> shift
    rest = m - (q << shift)
    half = 1 << (shift - 1)
    if rest > half or (rest == half and q & 1):
        q += 1
    m = q << shift
    if m >= _LIMIT:
        return float("-inf") if n < 0 else float("inf")
    return -m if n < 0 else m


def _double(x: float) -> float:
    """The double x rounded to float32 (half to even; inf where the cast overflows, as numpy)."""
    try:
        return _F32.unpack(_F32.pack(x))[0]
    except OverflowError:  # struct refuses what the C cast makes inf
        return math.copysign(math.inf, x)


def _back(v: float) -> Value:
    return int(v) if v.is_integer() else v


def f32(value: int | Fraction | float) -> Value:
    """A count assigned to a C++ float (numpy's conversion)."""
    if type(value) is int:
        if -_EXACT <= value <= _EXACT:
            return value
        if -_EXACT_IN_DOUBLE < value < _EXACT_IN_DOUBLE:
            return _round(value)
        if not -_LIMIT < value < _LIMIT:  # beyond float32 (and maybe double: float() would raise)
            return float("-inf") if value < 0 else float("inf")
        return _round(int(float(value)))
    return _back(_double(float(value)))


def add(a: Value, b: Value) -> Value:
    if type(a) is int and type(b) is int:
        n = a + b
        return n if -_EXACT <= n <= _EXACT else _round(n)
    return _back(_double(_double(float(a)) + _double(float(b))))


def mul(a: Value, b: Value) -> Value:
    if type(a) is int and type(b) is int:
        n = a * b
        return n if -_EXACT <= n <= _EXACT else _round(n)
    return _back(_double(_double(float(a)) * _double(float(b))))


def running_sum(values: Sequence[Value]) -> Value:
    """float32 values added one by one, left to right, in float32 (as numpy's accumulate, a
    sequential loop, unlike its pairwise sum).

    The engine sums every computation's costs this way (mixtral: ~95,000 additions), almost all
    of whole numbers: `add` and `f32` of two ints are written out in the loop (the same steps,
    without two calls per value); anything else goes through them."""
    if not values:
        return 0
    total = f32(values[0])
    pack, unpack = _F32.pack, _F32.unpack
    for i in range(1, len(values)):
        value = values[i]
        if type(value) is int and type(total) is int:
            if not -_EXACT <= value <= _EXACT:
                value = f32(value)
                if type(value) is not int:  # beyond float32's range: inf
                    total = add(total, value)
                    continue
            n = total + value
            if -_EXACT <= n <= _EXACT:
                total = n
            elif -_EXACT_IN_DOUBLE < n < _EXACT_IN_DOUBLE:  # _round's first case
                total = int(unpack(pack(n))[0])
            else:
                total = _round(n)
        else:
            total = add(total, f32(value))
    return total
