"""Generated loop nests with conditionals, and their unrolled twins (issue 29).

A `Nest` is 1-3 levels, outermost first. A level is a counter loop `i = start; while i < stop:
...; i += step` whose stop is a constant (known trip count), a runtime argument (unknown) or one
clamped from below (unknown, at least `trips`), or a `lax.scan` of known length; its body is a
list of ops on the carried h [4, 8]:

    dot           h <- h @ w                    (2 x 4 x 8 x 8 flops)
    tanh          h <- tanh(h)                  (32 transcendentals)
    cond_counter  cond(i % 2 == 0 or i < k, dot, tanh) on this level's counter
    switch        switch(i % 3, [dot, tanh, dot then dot]) on this level's counter
    cond_outer    cond(outer i % 2 == 0, dot, tanh) on the enclosing level's counter
    cond_data     cond(sum(h) > 0, dot, tanh): the program decides at run time
    inner         the next level (once, where it appears)

The twin (`unrolled`) is the same computation at concrete trip counts as Python loops with
Python `if`s: no loop, no conditional, so XLA's `cost_analysis()` of it is the truth for what the
rolled program executes (up to the rolled program's counter and predicate ops). A `cond_data`
has no Python answer: `force` picks its branch (True: dot on every execution, False: tanh), the
two extremes the bounds must hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import jax
import jax.numpy as jnp
from jax import lax

from tests.programs import Program

H, W = jax.ShapeDtypeStruct((4, 8), jnp.float32), jax.ShapeDtypeStruct((8, 8), jnp.float32)
BOUND = jax.ShapeDtypeStruct((), jnp.int32)
OPS = ("dot", "tanh", "cond_counter", "switch", "cond_outer", "cond_data")
RUNTIME = ("runtime", "clamped")  # levels whose stop is a runtime argument


@dataclass(frozen=True)
class Level:
    kind: str  # "known" | "runtime" | "clamped" | "scan"
    # known and scan: the trip count; clamped: the fewest trips (stop = max(n, start + trips x
    # step), a lower bound the program proves); runtime: unused (the twin's count is given)
    trips: int
    start: int = 0
    step: int = 1
    ops: tuple[str, ...] = ("dot",)  # "inner" marks where the next level runs
    threshold: int = 1  # cond_counter: i < start + threshold * step when `even` is False
    even: bool = True


@dataclass(frozen=True)
class Nest:
    levels: tuple[Level, ...]

    @property
    def name(self) -> str:
        import hashlib

        return "nest_" + hashlib.sha256(repr(self).encode()).hexdigest()[:16]

    @property
    def runtime(self) -> int:
        return sum(1 for lv in self.levels if lv.kind in RUNTIME)


def _dot(h, w):
    return h @ w


def _tanh(h, w):
    return jnp.tanh(h)


def _twice(h, w):
    return (h @ w) @ w


def _counter_pred(level: Level, i):
    if level.even:
        return i % 2 == 0
    return i < level.start + level.threshold * level.step


def rolled(nest: Nest) -> Program:
    """The nest as jax loops; one int32 argument per runtime level (its stop), outermost first."""

    def run(w, h, *stops):
        stops = list(stops)

        def level_fn(depth: int, h, outer_i):
            level = nest.levels[depth]
            stop = level.start + level.trips * level.step
            if level.kind == "runtime":
                stop = stops.pop(0)
            elif level.kind == "clamped":
                stop = jnp.maximum(stops.pop(0), stop)

            def body_ops(i, h):
                for op in level.ops:
                    if op == "dot":
                        h = _dot(h, w)
                    elif op == "tanh":
                        h = _tanh(h, w)
                    elif op == "cond_counter":
                        h = lax.cond(_counter_pred(level, i), lambda h: _dot(h, w), lambda h: _tanh(h, w), h)
                    elif op == "switch":
                        h = lax.switch(lax.rem(i, 3), [lambda h: _dot(h, w), lambda h: _tanh(h, w),
                                                      lambda h: _twice(h, w)], h)
                    elif op == "cond_outer":
                        j = outer_i if outer_i is not None else i
                        h = lax.cond(j % 2 == 0, lambda h: _dot(h, w), lambda h: _tanh(h, w), h)
                    elif op == "cond_data":
                        h = lax.cond(jnp.sum(h) > 0, lambda h: _dot(h, w), lambda h: _tanh(h, w), h)
                    elif op == "inner":
                        h = level_fn(depth + 1, h, i)
                return h

            if level.kind == "scan":
                return lax.scan(lambda h, i: (body_ops(i, h), None), h, jnp.arange(level.trips, dtype=jnp.int32))[0]

            def body(carry):
                i, h = carry
                return i + level.step, body_ops(i, h)

            return lax.while_loop(lambda c: c[0] < stop, body, (jnp.int32(level.start), h))[1]

        return level_fn(0, h, None)

    return Program(nest.name, run, (W, H) + (BOUND,) * nest.runtime)


def unrolled(nest: Nest, count: int, force: bool = True) -> Program:
    """The twin with every runtime level at `count` trips and every `cond_data` forced."""

    def run(w, h):
        def level_fn(depth: int, h, outer_i):
            level = nest.levels[depth]
            trips = count if level.kind in RUNTIME else level.trips
            for k in range(trips):
                i = k if level.kind == "scan" else level.start + k * level.step
                for op in level.ops:
                    fn: Callable | None = None
                    if op == "dot":
                        fn = _dot
                    elif op == "tanh":
                        fn = _tanh
                    elif op == "cond_counter":
                        fn = _dot if _counter_pred(level, i) else _tanh
                    elif op == "switch":
                        fn = [_dot, _tanh, _twice][i % 3]  # counters start at >= 0: lax.rem agrees
                    elif op == "cond_outer":
                        fn = _dot if (outer_i if outer_i is not None else i) % 2 == 0 else _tanh
                    elif op == "cond_data":
                        fn = _dot if force else _tanh
                    if fn is not None:
                        h = fn(h, w)
                    elif op == "inner":
                        h = level_fn(depth + 1, h, i)
            return h

        return level_fn(0, h, None)

    return Program(f"{nest.name}_twin_{count}_{int(force)}", run, (W, H))
