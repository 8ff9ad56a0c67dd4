"""Randomly generated jax programs (seeded, so the same programs every run): xla_estimate of
`compiled.as_text()` equals `compiled.cost_analysis()`, and the convolution / dot / reduce-window
instructions XLA keeps cost what an independent brute-force count says.

The catalogue test (test_rules_jax_programs.py) covers one program per op variant; this one
varies shapes, windows, paddings, dilations, groups and dtypes at random.
"""

from __future__ import annotations

import random

import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

import hloparse  # noqa: E402
from hloflops.engine import own_cost  # noqa: E402
from hloflops.xla.compare import xla_cost_of_compiled  # noqa: E402
from hloflops.xla.estimate import xla_estimate  # noqa: E402
from hloparse.ir import CallRole  # noqa: E402

KEYS = ("flops", "transcendentals", "bytes accessed")
S = jax.ShapeDtypeStruct


def _conv_program(rng: random.Random):
    groups = rng.choice([1, 1, 2, 4])
    cin, cout = groups * rng.randint(1, 3), groups * rng.randint(1, 3)
    spatial = rng.choice([1, 2])
    size = [rng.randint(3, 12) for _ in range(spatial)]
    kernel = [rng.randint(1, 4) for _ in range(spatial)]
    strides = [rng.randint(1, 3) for _ in range(spatial)]
    padding = [(rng.randint(0, 3), rng.randint(0, 3)) for _ in range(spatial)]
    lhs_dil = [rng.choice([1, 1, 2]) for _ in range(spatial)]
    rhs_dil = [rng.choice([1, 1, 2]) for _ in range(spatial)]
    batch = rng.randint(1, 3)
    dims = ("NCH", "OIH", "NCH") if spatial == 1 else ("NCHW", "OIHW", "NCHW")

    def f(x, w):
        return lax.conv_general_dilated(x, w, strides, padding, lhs_dil, rhs_dil, dims, feature_group_count=groups)

    return f, (S((batch, cin, *size), jnp.float32), S((cout, cin // groups, *kernel), jnp.float32))


def _dot_program(rng: random.Random):
    b, m, k, n = (rng.randint(1, 9) for _ in range(4))
    dtype = rng.choice([jnp.float32, jnp.bfloat16, jnp.int32])
    return (lambda x, y: jnp.einsum("bmk,bkn->bmn", x, y)), (S((b, m, k), dtype), S((b, k, n), dtype))


def _reduce_window_program(rng: random.Random):
    h, w = rng.randint(4, 20), rng.randint(4, 20)
    win = (1, rng.randint(1, 4), rng.randint(1, 4))
    stride = (1, rng.randint(1, 3), rng.randint(1, 3))
    pad = ((0, 0), (rng.randint(0, 2), rng.randint(0, 2)), (rng.randint(0, 2), rng.randint(0, 2)))
    op, init = rng.choice([(lax.add, 0.0), (lax.max, -jnp.inf)])
    return (lambda x: lax.reduce_window(x, init, op, win, stride, pad)), (S((2, h, w), jnp.float32),)


def _elementwise_program(rng: random.Random):
    shape = tuple(rng.randint(1, 17) for _ in range(rng.randint(1, 3)))
    fns = [jnp.exp, jnp.tanh, jnp.sin, jnp.log1p, jnp.sqrt, jnp.abs, lambda v: v * 2 + 1, jax.nn.sigmoid,
           jax.nn.gelu, jnp.cumsum, lambda v: jnp.sort(v, axis=-1), lambda v: jnp.max(v, axis=-1)]
    chosen = rng.sample(fns, 3)

    def f(x):
        for g in chosen:
            x = g(x)
        return x

    return f, (S(shape, jnp.float32),)


def _indexing_program(rng: random.Random):
    n, d, k = rng.randint(4, 40), rng.randint(1, 16), rng.randint(1, 8)
    kind = rng.choice(["gather", "scatter_add", "dynamic_slice", "dynamic_update_slice", "pad_concat"])

    if kind == "gather":
        return (lambda a, i: a[i] * 2), (S((n, d), jnp.float32), S((k,), jnp.int32))
    if kind == "scatter_add":
        return (lambda a, i, u: a.at[i].add(u)), (S((n, d), jnp.float32), S((k,), jnp.int32), S((k, d), jnp.float32))
    if kind == "dynamic_slice":
        return (lambda a, i: lax.dynamic_slice_in_dim(a, i, min(k, n)) + 1), (S((n, d), jnp.float32), S((), jnp.int32))
    if kind == "dynamic_update_slice":
        return ((lambda a, u, i: lax.dynamic_update_slice_in_dim(a, u, i, 0)),
                (S((n, d), jnp.float32), S((min(k, n), d), jnp.float32), S((), jnp.int32)))
    def pad_concat(a):
        both = jnp.concatenate([jnp.pad(a, ((1, 2), (0, 1))), jnp.pad(a[::-1], ((0, 3), (1, 0)))], axis=1)
        return both[:, :5].T * 2

    return pad_concat, (S((n, d), jnp.float32),)


GENERATORS = [_conv_program, _dot_program, _reduce_window_program, _elementwise_program, _indexing_program]
CASES = [(g.__name__.strip("_"), seed) for seed in range(40) for g in GENERATORS]


def _brute_force_valid_taps(inp: int, kernel: int, out: int, w) -> int:
    count = 0
    for o in range(out):
        for k in range(kernel):
            p = o * w.stride + k * w.rhs_dilation - w.pad_low  # index into the padded, dilated input
            if p >= 0 and p % w.lhs_dilation == 0 and p // w.lhs_dilation < inp:
                count += 1
    return count


def _check_instructions(module) -> int:
    """Brute-force the flops of each convolution / dot / reduce-window XLA kept; returns how many."""
    checked = 0
    stack = [module.entry.name]
    while stack:
        comp = module.computation(stack.pop())
        for inst in comp.instructions:
            stack.extend(s.computation for s in inst.calls if s.role in CallRole.CONTROL)
            shapes = comp.operand_shapes(inst)
            if inst.opcode == "convolution":
                lab, win = inst.conv_dim_labels, inst.window or ()
                valid = 1
                for s, w in enumerate(win):
                    valid *= _brute_force_valid_taps(shapes[0].dims[lab.input_spatial[s]],
                                                     shapes[1].dims[lab.kernel_spatial[s]],
                                                     inst.shape.dims[lab.output_spatial[s]], w)
                want = (2 * shapes[0].dims[lab.input_feature] // inst.feature_group_count
                        * inst.shape.dims[lab.output_feature]
                        * shapes[0].dims[lab.input_batch] // inst.batch_group_count * valid)
            elif inst.opcode == "dot":
                width = 1
                for d in inst.dot_dimension_numbers.lhs_contracting:
                    width *= shapes[0].dims[d]
                want = 2 * inst.shape.num_elements * width
            else:
                continue
            assert own_cost(module, comp, inst, view="exact").cost.flops == want, inst.name
            checked += 1
    return checked


@pytest.mark.parametrize("kind,seed", CASES, ids=[f"{k}-{s}" for k, s in CASES])
def test_random_program(kind, seed):
    rng = random.Random(f"{kind}-{seed}")
    fn, args = globals()["_" + kind](rng)
    compiled = jax.jit(fn).lower(*args).compile()
    module = hloparse.parse(compiled.as_text())
    estimate = xla_estimate(module, diagnostics=True)
    xla = xla_cost_of_compiled(compiled)
    for key in KEYS:
        assert estimate.get(key, 0.0) == float(xla.get(key, 0.0)), (key, estimate, xla)
    assert estimate == {k: float(v) for k, v in xla.items() if v != 0}  # every key, diagnostics too
    _check_instructions(module)


def test_random_convolutions_are_checked_against_brute_force():
    checked = 0
    for seed in range(24):
        fn, args = _conv_program(random.Random(f"conv_program-{seed}"))
        checked += _check_instructions(hloparse.parse(jax.jit(fn).lower(*args).compile().as_text()))
    assert checked >= 20  # XLA:CPU keeps nearly every convolution as an HLO convolution
