"""Conditionals inside loops, written as users write them, each with its unrolled twin.

`PAIRS` holds `LoopPair`s: the rolled program is a `fori_loop` / `lax.scan` / `nn.scan` whose body
holds a `lax.cond` or `lax.switch` on the loop counter (`i % k`, `i == 0`, `i < c`,
`i >= n - c`, an outer and an inner counter of nested loops, forward and `jax.grad` through the
loop); the unrolled twin is a Python loop with a Python `if` (no loop, no conditional), whose
XLA `cost_analysis()` is the truth for the rolled program up to its loop-counter ops.

`DATA` holds the programs whose predicate reads data, each with its two twins: every trip
taking the cheap branch, and every trip taking the dear one (`DataCase`).

Shapes are tiny (h: [4, 8], weights [8, 8]): one dot is 2 * 4 * 8 * 8 = 512 flops, one tanh
32 transcendentals.
"""

from __future__ import annotations

from dataclasses import dataclass

import flax.linen as nn
import jax.numpy as jnp
from jax import lax

from tests.programs import LoopPair, Program
from tests.programs.jaxshapes import S
from tests.programs.loop_helpers import make_pair, sum_loss

H, W = S((4, 8)), S((8, 8))
DOT = 2 * 4 * 8 * 8
TANH = 4 * 8


def one(h, w):
    return h @ w


def two(h, w):
    return (h @ w) @ w


def tanh_one(h, w):
    return jnp.tanh(h @ w)


def _fori(n, pick):
    """fori_loop over n trips whose body takes `pick(i)`'s branch (a Python function of a traced i)."""
    def rolled(w, h):
        return lax.fori_loop(0, n, lambda i, h: pick(i, h, w, traced=True), h)

    def unrolled(w, h):
        for i in range(n):
            h = pick(i, h, w, traced=False)
        return h

    return rolled, unrolled


def _cond(predicate, true_fn, false_fn):
    """lax.cond on a traced predicate, a Python `if` on a Python one."""
    def pick(i, h, w, traced):
        if traced:
            return lax.cond(predicate(i), true_fn, false_fn, h, w)
        return true_fn(h, w) if predicate(i) else false_fn(h, w)

    return pick


def _switch(index, fns):
    def pick(i, h, w, traced):
        if traced:
            return lax.switch(index(i), fns, h, w)
        return fns[min(max(index(i), 0), len(fns) - 1)](h, w)

    return pick


def _fori_pairs() -> list[LoopPair]:
    out = []
    cases = {
        # the example: one matmul on even trips, two on odd ones
        "fori10_mod2": (10, _cond(lambda i: i % 2 == 0, one, two)),
        "fori6_warmup_eq0": (6, _cond(lambda i: i == 0, tanh_one, one)),
        "fori8_lt3": (8, _cond(lambda i: i < 3, two, tanh_one)),
        "fori7_last2": (7, _cond(lambda i: i >= 7 - 2, tanh_one, two)),
        "fori9_switch_mod3": (9, _switch(lambda i: i % 3, [one, two, tanh_one])),
        "fori5_from2_mod2": (5, _cond(lambda i: (i + 2) % 2 == 1, two, one)),
    }
    for name, (n, pick) in cases.items():
        rolled, unrolled = _fori(n, pick)
        out.append(make_pair(name, rolled, unrolled, (W, H), f"{name}: cond on the fori counter", (n,)))
    # a cond inside a cond, both on the counter: i % 3 decides only on even trips
    inner = _cond(lambda i: i % 3 == 0, tanh_one, two)

    def nested(i, h, w, traced):
        if traced:
            return lax.cond(i % 2 == 0, lambda h, w: inner(i, h, w, True), one, h, w)
        return inner(i, h, w, False) if i % 2 == 0 else one(h, w)

    rolled, unrolled = _fori(12, nested)
    out.append(make_pair("fori12_cond_in_cond", rolled, unrolled, (W, H), "a counter cond inside a counter cond",
                         (12,)))
    rolled, unrolled = _fori(6, _cond(lambda i: i % 3 == 0, tanh_one, two))
    out.append(make_pair("fori6_mod3_grad", sum_loss(rolled), sum_loss(unrolled), (W, H),
                         "jax.grad through a cond on the counter", (6,), grad=True))
    return out


def _nested_pairs() -> list[LoopPair]:
    """Outer fori of 3, inner fori of 4: a cond on the outer counter and one on the inner one,
    both inside the inner body."""
    def rolled(w, h):
        def outer(i, h):
            def inner(j, h):
                h = lax.cond(i == 1, two, one, h, w)
                return lax.cond(j % 2 == 1, tanh_one, one, h, w)
            return lax.fori_loop(0, 4, inner, h)
        return lax.fori_loop(0, 3, outer, h)

    def unrolled(w, h):
        for i in range(3):
            for j in range(4):
                h = two(h, w) if i == 1 else one(h, w)
                h = tanh_one(h, w) if j % 2 == 1 else one(h, w)
        return h

    return [make_pair("nested3x4_outer_and_inner", rolled, unrolled, (W, H), "conds on outer and inner counters",
                      (3, 4))]


def _scan_pairs() -> list[LoopPair]:
    """lax.scan carrying its step counter (the way a train loop counts steps), and its gradient."""
    def step(carry, x, traced):
        h, i, w = carry
        if traced:
            h = lax.cond(i % 4 == 0, tanh_one, two, h, w)
        else:
            h = tanh_one(h, w) if i % 4 == 0 else two(h, w)
        return (h + x, i + 1, w), None

    def rolled(w, h, xs):
        (h, _, _), _ = lax.scan(lambda c, x: step(c, x, True), (h, 0, w), xs)
        return h

    def unrolled(w, h, xs):
        carry = (h, 0, w)
        for t in range(xs.shape[0]):
            carry, _ = step(carry, xs[t], False)
        return carry[0]

    args = (W, H, S((6, 4, 8)))
    return [make_pair("scan6_mod4", rolled, unrolled, args, "lax.scan, cond on a carried counter", (6,)),
            make_pair("scan6_mod4_grad", sum_loss(rolled), sum_loss(unrolled), args,
                      "jax.grad through a cond in a scan", (6,), grad=True)]


class _Step(nn.Module):
    """One step of an nn.scan: a Dense on warm-up steps (counter < 2), the Dense twice after
    (flax's nn.cond, which lifts lax.cond over the module's variables)."""

    def setup(self):
        self.dense = nn.Dense(8, use_bias=False)

    def __call__(self, carry, _):
        h, i = carry
        h = nn.cond(i < 2, lambda m, h: m.dense(h), lambda m, h: m.dense(m.dense(h)), self, h)
        return (h, i + 1), None


def _nn_scan_pairs() -> list[LoopPair]:
    scan = nn.scan(_Step, variable_broadcast="params", split_rngs={"params": False}, length=5)
    # The parameters as flax lays them out (an init would run nn.cond with variables being made).
    params = {"params": {"dense": {"kernel": W}}}

    def rolled(params, h):
        (h, _), _ = scan().apply(params, (h, 0), None)
        return h

    def unrolled(params, h):
        kernel = params["params"]["dense"]["kernel"]
        for i in range(5):
            h = h @ kernel if i < 2 else (h @ kernel) @ kernel
        return h

    return [make_pair("nn_scan5_warmup_lt2", rolled, unrolled, (params, H), "nn.scan, cond on a carried counter",
                      (5,)),
            make_pair("nn_scan5_warmup_lt2_grad", sum_loss(rolled), sum_loss(unrolled), (params, H),
                      "jax.grad through nn.cond in an nn.scan", (5,), grad=True)]


@dataclass(frozen=True)
class DataCase:
    """A predicate on data: the rolled program, and its twins taking the cheap / dear branch on
    every trip (Python loops, no conditional)."""

    name: str
    rolled: Program
    cheap: Program
    dear: Program
    trips: int


def _data_cases() -> list[DataCase]:
    n = 5

    def rolled(w, h):
        return lax.fori_loop(0, n, lambda i, h: lax.cond(jnp.sum(h) > 0, two, tanh_one, h, w), h)

    def always(fn):
        def run(w, h):
            for _ in range(n):
                jnp.sum(h) > 0  # noqa: B015  (the rolled program computes its predicate; XLA drops it here)
                h = fn(h, w)
            return h
        return run

    return [DataCase("fori5_sum_positive", Program("branch_fori5_sum_positive", rolled, (W, H)),
                     Program("branch_fori5_sum_positive_cheap", always(tanh_one), (W, H)),
                     Program("branch_fori5_sum_positive_dear", always(two), (W, H)), n)]


PAIRS: list[LoopPair] = _fori_pairs() + _nested_pairs() + _scan_pairs() + _nn_scan_pairs()
BY_NAME: dict[str, LoopPair] = {p.name: p for p in PAIRS}
DATA: list[DataCase] = _data_cases()
