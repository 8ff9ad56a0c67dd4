"""Bounds on a trip count the program proves when the count itself is a runtime value.

`fori_loop(0, jnp.minimum(n, 10), body)` with a traced `n` has no trip count, but its counter
starts at a constant, moves by a constant step and stops at a bound that is clamped to a
constant: the count lies in [0, 10]. Here the bound's initial value (an expression over runtime
inputs) is given an interval by integer interval arithmetic (`minimum`, `maximum`, `clamp`,
`select`, `add`, `subtract`, `negate`, integer converts; anything else is unbounded), and the
closed form of `hloflops.loops.tripcount.solve_counter` is applied at both ends: for
`i < b` with a positive step the trip count grows with b, so b's lower and upper bounds give the
count's. A side of the interval that is not proved stays open (lower 0, upper None).
"""

from __future__ import annotations

from typing import Callable, Mapping

from hloflops.loops import loop_eval
from hloflops.loops.loop_eval import Expr, Path

Interval = tuple["int | None", "int | None"]
_UNBOUNDED: Interval = (None, None)


def interval(expr: Expr) -> Interval:
    """(lowest, highest) value of an integer expression over runtime inputs; None: unbounded."""
    kind = expr[0]
    if kind == "const":
        value = expr[1]
        return (value, value) if isinstance(value, int) and not isinstance(value, bool) else _UNBOUNDED
    if kind != "op":
        return _UNBOUNDED
    _, opcode, dtype, _, children = expr
    if dtype not in loop_eval.INT_BITS:
        return _UNBOUNDED
    rule = _RULES.get(opcode)
    if rule is None:
        return _UNBOUNDED
    low, high = rule([interval(c) for c in children])
    # An interval that does not fit the type may have wrapped: not proved.
    if low is not None and low != loop_eval.cast(low, dtype):
        low = None
    if high is not None and high != loop_eval.cast(high, dtype):
        high = None
    return low, high


def _known(values: list[int | None]) -> list[int]:
    return [v for v in values if v is not None]


def _minimum(parts: list[Interval]) -> Interval:
    lows, highs = [p[0] for p in parts], _known([p[1] for p in parts])
    return (min(lows) if None not in lows else None), (min(highs) if highs else None)


def _maximum(parts: list[Interval]) -> Interval:
    lows, highs = _known([p[0] for p in parts]), [p[1] for p in parts]
    return (max(lows) if lows else None), (max(highs) if None not in highs else None)


def _clamp(parts: list[Interval]) -> Interval:  # clamp(lo, x, hi) = min(max(x, lo), hi)
    lo, x, hi = parts
    return _minimum([_maximum([x, lo]), hi])


def _select(parts: list[Interval]) -> Interval:
    a, b = parts[1], parts[2]
    low = min(a[0], b[0]) if a[0] is not None and b[0] is not None else None
    high = max(a[1], b[1]) if a[1] is not None and b[1] is not None else None
    return low, high


def _add(parts: list[Interval]) -> Interval:
    lows, highs = [p[0] for p in parts], [p[1] for p in parts]
    return (sum(lows) if None not in lows else None), (sum(highs) if None not in highs else None)  # type: ignore


def _subtract(parts: list[Interval]) -> Interval:
    (a_low, a_high), (b_low, b_high) = parts
    low = a_low - b_high if a_low is not None and b_high is not None else None
    high = a_high - b_low if a_high is not None and b_low is not None else None
    return low, high


def _negate(parts: list[Interval]) -> Interval:
    low, high = parts[0]
    return (-high if high is not None else None), (-low if low is not None else None)


_RULES: dict[str, Callable[[list[Interval]], Interval]] = {
    "minimum": _minimum, "maximum": _maximum, "clamp": _clamp, "select": _select, "add": _add,
    "subtract": _subtract, "negate": _negate, "convert": lambda parts: parts[0],  # int -> int: checked above
}


def counter_trip_bounds(cond_expr: Expr, updates: Mapping[Path, Expr], initial: Mapping[Path, object],
                        runtime: Mapping[Path, Expr], dtypes: Mapping[Path, str],
                        solve: Callable[[int, int, str, int], int | None],
                        constant_step: Callable[[Expr, Path], int | None]) -> tuple[int, int | None, str] | None:
    """(lower, upper, note) on the trip count of a counter loop `init + k*step <dir> b` whose bound
    b is loop-invariant and runtime-valued (`runtime`: its initial expression); None when the loop
    is not of that shape or nothing is proved."""
    invariant = {p: v for p, v in initial.items() if updates.get(p) == ("var", p)}
    counters = [p for p in updates if updates[p] != ("var", p)]
    if len(counters) != 1 or any(updates.get(p) != ("var", p) for p in runtime):
        return None
    iv = counters[0]
    init = initial.get(iv)
    if dtypes.get(iv) not in loop_eval.INT_BITS or not isinstance(init, int) or isinstance(init, bool):
        return None
    step = constant_step(loop_eval.fold(loop_eval.substitute(updates[iv], invariant, dtypes)), iv)
    cond = loop_eval.fold(_inline(loop_eval.substitute(cond_expr, invariant, dtypes), runtime))
    if step is None or cond[0] != "op" or cond[1] != "compare":
        return None
    (left, right), direction = cond[4], cond[3]
    if right == ("var", iv):
        left, right, direction = right, left, {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE"}.get(direction, "")
    if left != ("var", iv) or direction not in ("LT", "LE", "GT", "GE") or loop_eval.variables(right):
        return None
    low, high = interval(right)
    if direction in ("GT", "GE"):  # a decreasing counter: the lower the bound, the more trips
        low, high = high, low
    fewest = solve(init, step, direction, low) if low is not None else None
    most = solve(init, step, direction, high) if high is not None else None
    if most is not None and not _fits(init + most * step, dtypes[iv]):
        most = None
    if fewest is None and most is None:
        return None
    note = (f"counter element {list(iv)}: init {init}, step {step:+d}, exits when not (i {direction} b), "
            f"b a runtime value in [{_end(interval(right)[0])}, {_end(interval(right)[1])}]")
    return (fewest or 0), most, note


def _inline(expr: Expr, runtime: Mapping[Path, Expr]) -> Expr:
    """Each runtime-valued invariant element replaced by its initial expression."""
    if expr[0] == "var" and expr[1] in runtime:
        return runtime[expr[1]]
    if expr[0] == "op":
        return expr[:4] + (tuple(_inline(c, runtime) for c in expr[4]),)
    return expr


def _fits(value: int, dtype: str) -> bool:
    return value == loop_eval.cast(value, dtype)


def _end(value: int | None) -> str:
    return "unbounded" if value is None else f"{value:,}"
