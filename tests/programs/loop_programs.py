"""Loop and remat programs as pairs: the same computation with a loop and without one.

`PAIRS` holds `LoopPair(name, rolled, unrolled, notes, trip_counts)`: the rolled program uses a
loop (lax.scan, fori_loop, while_loop, nn.scan, nn.remat_scan); the unrolled one computes the
same values with straight-line code (a Python loop or `scan(unroll=True)`). Gradient programs
differentiate with respect to **every** input, so the unrolled program computes every layer's
input gradient just as the loop must. The loop-aware total of the rolled program should match
the unrolled program's (up to what XLA's optimizer does differently to straight-line code).

`trip_counts` are the trip counts of the rolled program's loop levels, outermost first, as XLA
runs them (`scan(length=12, unroll=4)` runs 3 times; a length-1 level XLA removes is still
listed); the forward loop and the backward loop of a gradient program each run that many times.

`UNKNOWN_TRIP` is a while loop whose trip count depends on the data (no static analysis can
know it); `UNKNOWN_TRIPS` adds a `fori_loop` with a traced bound. Their args are concrete and
their actual trip counts are recorded (and checked by running them).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax

from tests.programs import LoopPair, Program, UnknownTripProgram
from tests.programs.jaxshapes import S, f32
from tests.programs.loop_helpers import sum_loss, make_pair
from tests.programs.loop_programs_flax import flax_pairs


# ------------------------------------------------------------------------------------------------
# lax.scan: unroll=1 against unroll=True / a Python loop
# ------------------------------------------------------------------------------------------------


def _rnn_step(w):
    def step(h, x):
        h = jnp.tanh(h @ w + x)
        return h, jnp.sum(h, axis=-1)

    return step


def _rnn(unroll):
    def run(w, h0, xs):
        return lax.scan(_rnn_step(w), h0, xs, unroll=unroll)

    return run


def _scan_pairs() -> list[LoopPair]:
    out = []
    d, b = 16, 4
    for length in [3, 8, 16]:
        args = (S((d, d)), S((b, d)), S((length, b, d)))
        notes = f"tanh RNN over {length} steps; rolled unroll=1, unrolled unroll=True (no while)"
        out.append(make_pair(f"scan_rnn_T{length}", _rnn(1), _rnn(True), args, notes, (length,)))
        out.append(
            make_pair(
                f"scan_rnn_T{length}_grad",
                sum_loss(_rnn(1)),
                sum_loss(_rnn(True)),
                args,
                notes + "; value_and_grad w.r.t. w, h0 and xs",
                (length,),
                grad=True,
            )
        )

    def elementwise_rolled(a, c0, xs):
        return lax.scan(lambda c, x: (jnp.sin(c) * a + x, jnp.cos(c)), c0, xs)

    def elementwise_unrolled(a, c0, xs):
        c, ys = c0, []
        for t in range(xs.shape[0]):
            ys.append(jnp.cos(c))
            c = jnp.sin(c) * a + xs[t]
        return c, jnp.stack(ys)

    for length in [5, 12]:
        args = (S((32,)), S((32,)), S((length, 32)))
        notes = f"elementwise sin/cos scan over {length} steps against a Python loop"
        out.append(
            make_pair(f"scan_elementwise_T{length}", elementwise_rolled, elementwise_unrolled, args, notes, (length,))
        )
        out.append(
            make_pair(
                f"scan_elementwise_T{length}_grad",
                sum_loss(elementwise_rolled),
                sum_loss(elementwise_unrolled),
                args,
                notes + "; value_and_grad w.r.t. every input",
                (length,),
                grad=True,
            )
        )
    out.append(
        make_pair(
            "scan_rnn_T12_unroll4_grad",
            sum_loss(_rnn(4)),
            sum_loss(_rnn(True)),
            (S((d, d)), S((b, d)), S((12, b, d))),
            "unroll=4 over 12 steps: the while runs 3 times over a body holding 4 steps",
            (3,),
            grad=True,
        )
    )

    def cumulative_rolled(xs):
        return lax.scan(lambda c, x: (c + x, c * x), jnp.zeros(xs.shape[1:], xs.dtype), xs)

    def cumulative_unrolled(xs):
        c, ys = jnp.zeros(xs.shape[1:], xs.dtype), []
        for t in range(xs.shape[0]):
            ys.append(c * xs[t])
            c = c + xs[t]
        return c, jnp.stack(ys)

    out.append(
        make_pair(
            "scan_cumulative_T10",
            cumulative_rolled,
            cumulative_unrolled,
            (S((10, 8, 8)),),
            "carry-only arithmetic, scan against a Python loop",
            (10,),
        )
    )
    return out


# ------------------------------------------------------------------------------------------------
# fori_loop with static bounds, while_loop counting down, nested scans
# ------------------------------------------------------------------------------------------------


def _fori_pairs() -> list[LoopPair]:
    out = []

    def rolled(lo, hi):
        return lambda w, x: lax.fori_loop(lo, hi, lambda i, x: jnp.tanh(x @ w) * 0.9, x)

    def unrolled(lo, hi):
        def run(w, x):
            for _ in range(lo, hi):
                x = jnp.tanh(x @ w) * 0.9
            return x

        return run

    args = (S((16, 16)), S((4, 16)))
    for lo, hi in [(0, 4), (0, 10), (3, 17)]:
        notes = f"fori_loop({lo}, {hi}) with static bounds (lowered to a scan) against a Python loop"
        out.append(make_pair(f"fori_{lo}_{hi}", rolled(lo, hi), unrolled(lo, hi), args, notes, (hi - lo,)))
        out.append(
            make_pair(
                f"fori_{lo}_{hi}_grad",
                sum_loss(rolled(lo, hi)),
                sum_loss(unrolled(lo, hi)),
                args,
                notes + "; value_and_grad w.r.t. w and x",
                (hi - lo,),
                grad=True,
            )
        )

    def uses_index_rolled(x):
        return lax.fori_loop(0, 6, lambda i, x: x * 0.5 + jnp.sin(x + i.astype(f32)), x)

    def uses_index_unrolled(x):
        for i in range(6):
            x = x * 0.5 + jnp.sin(x + float(i))
        return x

    out.append(
        make_pair(
            "fori_uses_index",
            uses_index_rolled,
            uses_index_unrolled,
            (S((64,)),),
            "the body reads the induction variable",
            (6,),
        )
    )
    return out


def _while_pairs() -> list[LoopPair]:
    out = []

    def countdown_rolled(start):
        def run(w, x):
            def body(carry):
                i, x = carry
                return i - 1, jnp.cos(x @ w)

            return lax.while_loop(lambda c: c[0] > 0, body, (jnp.int32(start), x))[1]

        return run

    def countdown_unrolled(start):
        def run(w, x):
            for _ in range(start):
                x = jnp.cos(x @ w)
            return x

        return run

    args = (S((8, 8)), S((2, 8)))
    for start in [6, 10]:
        out.append(
            make_pair(
                f"while_countdown_{start}",
                countdown_rolled(start),
                countdown_unrolled(start),
                args,
                f"while i > 0: i -= 1, from {start} (XLA finds it only by brute force)",
                (start,),
            )
        )

    def step3_rolled(x):
        return lax.while_loop(lambda c: c[0] <= 9, lambda c: (c[0] + 3, jnp.exp(-c[1]) + c[1]), (jnp.int32(0), x))[1]

    def step3_unrolled(x):
        for _ in range(4):
            x = jnp.exp(-x) + x
        return x

    out.append(
        make_pair(
            "while_step3_le9",
            step3_rolled,
            step3_unrolled,
            (S((32,)),),
            "while i <= 9: i += 3, from 0: 4 iterations",
            (4,),
        )
    )

    def doubling_rolled(x):
        return lax.while_loop(lambda c: c[0] < 1000, lambda c: (c[0] * 2, jnp.tanh(c[1]) + 1.0), (jnp.int32(1), x))[1]

    def doubling_unrolled(x):
        for _ in range(10):
            x = jnp.tanh(x) + 1.0
        return x

    out.append(
        make_pair(
            "while_doubling_lt1000",
            doubling_rolled,
            doubling_unrolled,
            (S((32,)),),
            "while i < 1000: i *= 2, from 1: 10 iterations (multiplicative update)",
            (10,),
        )
    )
    return out


def _nested_pairs() -> list[LoopPair]:
    def rolled(w, x, xs):
        def outer(h, row):
            h, _ = lax.scan(lambda h, x: (jnp.tanh(h @ w + x), None), h, row)
            return h * 0.5, jnp.sum(h)

        return lax.scan(outer, x, xs)

    def unrolled(w, x, xs):
        h, ys = x, []
        for i in range(xs.shape[0]):
            for j in range(xs.shape[1]):
                h = jnp.tanh(h @ w + xs[i, j])
            ys.append(jnp.sum(h))
            h = h * 0.5
        return h, jnp.stack(ys)

    out = []
    for outer_n, inner_n in [(3, 4), (5, 2)]:
        args = (S((8, 8)), S((2, 8)), S((outer_n, inner_n, 2, 8)))
        notes = f"scan of {outer_n} over a scan of {inner_n}"
        out.append(make_pair(f"nested_scan_{outer_n}x{inner_n}", rolled, unrolled, args, notes, (outer_n, inner_n)))
        out.append(
            make_pair(
                f"nested_scan_{outer_n}x{inner_n}_grad",
                sum_loss(rolled),
                sum_loss(unrolled),
                args,
                notes + "; value_and_grad w.r.t. every input",
                (outer_n, inner_n),
                grad=True,
            )
        )
    return out


# ------------------------------------------------------------------------------------------------
# jax.checkpoint policies, convolutions, lax.cond inside scans; a train step with optax
# ------------------------------------------------------------------------------------------------

POLICIES: dict[str, Any] = {
    "nothing_saveable": jax.checkpoint_policies.nothing_saveable,
    "dots_saveable": jax.checkpoint_policies.dots_saveable,
    "everything_saveable": jax.checkpoint_policies.everything_saveable,
    "checkpoint_dots": jax.checkpoint_policies.checkpoint_dots,
}


def _layer(h, w):
    return jnp.tanh(h @ w) + 0.1 * jnp.sin(h)


def _policy_pairs() -> list[LoopPair]:
    out = []
    for policy_name, policy in POLICIES.items():
        for n_layers in [4, 7] if policy_name in ("nothing_saveable", "dots_saveable") else [4]:
            layer = jax.checkpoint(_layer, policy=policy)

            def rolled(ws, x, layer=layer):
                return lax.scan(lambda h, w: (layer(h, w), None), x, ws)[0]

            def unrolled(ws, x, layer=layer):
                for i in range(ws.shape[0]):
                    x = layer(x, ws[i])
                return x

            args = (S((n_layers, 16, 16)), S((4, 16)))
            out.append(
                make_pair(
                    f"checkpoint_{policy_name}_L{n_layers}_grad",
                    sum_loss(rolled),
                    sum_loss(unrolled),
                    args,
                    f"scan over {n_layers} layers of jax.checkpoint(layer, policy={policy_name}) against a "
                    "Python loop of the same checkpointed layer; value_and_grad w.r.t. ws and x",
                    (n_layers,),
                    grad=True,
                )
            )
    return out


def _conv(x, w):
    return lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def _conv_and_cond_pairs() -> list[LoopPair]:
    out = []

    def fori_rolled(w, x):
        return lax.fori_loop(0, 3, lambda i, x: jax.nn.relu(_conv(x, w)) * 0.5, x)

    def fori_unrolled(w, x):
        for _ in range(3):
            x = jax.nn.relu(_conv(x, w)) * 0.5
        return x

    out.append(
        make_pair(
            "conv_fori_3_grad",
            sum_loss(fori_rolled),
            sum_loss(fori_unrolled),
            (S((3, 3, 4, 4)), S((2, 8, 8, 4))),
            "fori_loop of 3 steps of one shared 3x3 SAME conv + relu; value_and_grad w.r.t. w and x",
            (3,),
            grad=True,
        )
    )

    def scan_rolled(ws, x):
        return lax.scan(lambda x, w: (jax.nn.relu(_conv(x, w)) * 0.5, jnp.sum(x)), x, ws)

    def scan_unrolled(ws, x):
        sums = []
        for i in range(ws.shape[0]):
            sums.append(jnp.sum(x))
            x = jax.nn.relu(_conv(x, ws[i])) * 0.5
        return x, jnp.stack(sums)

    out.append(
        make_pair(
            "conv_scan_5_layers_grad",
            sum_loss(scan_rolled),
            sum_loss(scan_unrolled),
            (S((5, 3, 3, 4, 4)), S((2, 8, 8, 4))),
            "lax.scan over 5 stacked 3x3 SAME conv layers + relu; value_and_grad w.r.t. the kernels and x",
            (5,),
            grad=True,
        )
    )

    def branch(h, x):
        return lax.cond(jnp.sum(x) > 0, lambda h: jnp.tanh(h * x), lambda h: jnp.sin(h) + x, h)

    def cond_rolled(h, xs):
        return lax.scan(lambda h, x: (branch(h, x), jnp.sum(h)), h, xs)

    def cond_unrolled(h, xs):
        ys = []
        for t in range(xs.shape[0]):
            ys.append(jnp.sum(h))
            h = branch(h, xs[t])
        return h, jnp.stack(ys)

    args = (S((16,)), S((8, 16)))
    notes = "scan of 8 steps whose body holds a data-dependent lax.cond"
    out.append(make_pair("scan_with_cond", cond_rolled, cond_unrolled, args, notes, (8,)))
    out.append(
        make_pair(
            "scan_with_cond_grad",
            sum_loss(cond_rolled),
            sum_loss(cond_unrolled),
            args,
            notes + "; value_and_grad w.r.t. h and xs",
            (8,),
            grad=True,
        )
    )
    return out


def _train_step_pairs() -> list[LoopPair]:
    out = []
    n_layers, d, b = 6, 16, 8
    for opt_name, tx in [("sgd", optax.sgd(0.01)), ("adam", optax.adam(1e-3))]:

        def loss_rolled(ws, x, y):
            h = lax.scan(lambda h, w: (jnp.tanh(h @ w), None), x, ws)[0]
            return jnp.mean(optax.l2_loss(h, y))

        def loss_unrolled(ws, x, y):
            h = x
            for i in range(ws.shape[0]):
                h = jnp.tanh(h @ ws[i])
            return jnp.mean(optax.l2_loss(h, y))

        def step(loss_fn, tx=tx):
            def train_step(ws, opt_state, x, y):
                loss, (g_ws, g_x, g_y) = jax.value_and_grad(loss_fn, argnums=(0, 1, 2))(ws, x, y)
                updates, opt_state = tx.update(g_ws, opt_state, ws)
                return optax.apply_updates(ws, updates), opt_state, loss, g_x, g_y

            return train_step

        ws = S((n_layers, d, d))
        # A real (concrete) initial optimizer state: random values would be invalid (adam's nu >= 0).
        opt_state = tx.init(np.zeros(ws.shape, np.float32))
        args = (ws, opt_state, S((b, d)), S((b, d)))
        out.append(
            make_pair(
                f"train_step_{opt_name}",
                step(loss_rolled),
                step(loss_unrolled),
                args,
                f"optax {opt_name} train step of a {n_layers}-layer tanh MLP scanned over stacked weights; "
                "grads w.r.t. the weights, the input and the targets",
                (n_layers,),
            )
        )
    return out


# ------------------------------------------------------------------------------------------------
# Data-dependent trip counts
# ------------------------------------------------------------------------------------------------


def _doubling_until(x):
    """Double-and-add-one until max(x) >= 1000; returns (x, iterations)."""

    def body(carry):
        x, i = carry
        return x * 2.0 + 1.0, i + 1

    return lax.while_loop(lambda c: jnp.max(c[0]) < 1000.0, body, (x, jnp.int32(0)))


def _traced_bound(n, w, x):
    """fori_loop(0, n) with n an argument: the bound is only known at run time."""

    def body(i, carry):
        x, count = carry
        return jnp.tanh(x @ w), count + 1

    return lax.fori_loop(0, n, body, (x, jnp.int32(0)))


# From 1.0: 1, 3, 7, 15, 31, 63, 127, 255, 511, 1023 -> 9 doublings reach 1000.
UNKNOWN_TRIP = UnknownTripProgram(
    program=Program("unknown_trip_doubling_until_1000", _doubling_until, (np.ones((8,), np.float32),)),
    actual_trip_count=9,
    notes="while max(x) < 1000: x = 2x + 1, from ones: the bound depends on the data; returns (x, iterations)",
)
UNKNOWN_TRIPS: tuple[UnknownTripProgram, ...] = (
    UNKNOWN_TRIP,
    UnknownTripProgram(
        program=Program(
            "unknown_trip_fori_traced_bound",
            _traced_bound,
            (np.int32(7), np.eye(8, dtype=np.float32) * 0.5, np.ones((2, 8), np.float32)),
        ),
        actual_trip_count=7,
        notes="fori_loop(0, n) with n = 7 passed as an argument; returns (x, iterations)",
    ),
)


# ------------------------------------------------------------------------------------------------
# The catalogue
# ------------------------------------------------------------------------------------------------


def _build() -> list[LoopPair]:
    pairs = (
        _scan_pairs()
        + _fori_pairs()
        + _while_pairs()
        + _nested_pairs()
        + flax_pairs()
        + _policy_pairs()
        + _conv_and_cond_pairs()
        + _train_step_pairs()
    )
    names = [p.name for p in pairs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"duplicate pair names: {duplicates}")
    return pairs


PAIRS: list[LoopPair] = _build()
BY_NAME: dict[str, LoopPair] = {p.name: p for p in PAIRS}
