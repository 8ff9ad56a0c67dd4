"""The second half of the lax catalogue: reductions, windows, sort, indexing, data movement, fft,
rng, linalg, control flow, and grad / checkpoint variants. Assembled in lax_programs.PROGRAMS.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import jax.scipy as jsp
from jax import lax

from tests.programs import Program
from tests.programs import formulas as F
from tests.programs.jaxshapes import S, bf16, c64, f32, pred, s32, u32

# ------------------------------------------------------------------------------------------------
# Reductions
# ------------------------------------------------------------------------------------------------


def _reduction_programs() -> list[Program]:
    out = []
    for fname, fn in [("sum", jnp.sum), ("max", jnp.max), ("min", jnp.min), ("prod", jnp.prod)]:
        for shape, axis in [((16, 64), 1), ((16, 64), 0), ((4, 8, 16), None), ((4, 8, 16), (0, 2))]:
            dims = tuple(range(len(shape))) if axis is None else (axis if isinstance(axis, tuple) else (axis,))
            axis_name = "all" if axis is None else "_".join(map(str, dims))
            out.append(
                Program(
                    f"reduce_{fname}_f32_{'x'.join(map(str, shape))}_axis{axis_name}",
                    lambda x, fn=fn, axis=axis: fn(x, axis=axis),
                    (S(shape),),
                    F.reduction_formula(shape, dims),
                )
            )
    out.append(
        Program(
            "reduce_sum_s32_16x64",
            lambda x: jnp.sum(x, axis=1),
            (S((16, 64), s32),),
            F.reduction_formula((16, 64), (1,)),
        )
    )
    out.append(Program("reduce_sum_bf16_16x64", lambda x: jnp.sum(x, axis=1), (S((16, 64), bf16),), None))
    out.append(  # the mean's divide adds one flop per output element
        Program(
            "reduce_mean_f32_16x64",
            lambda x: jnp.mean(x, axis=1),
            (S((16, 64)),),
            F.reduction_formula((16, 64), (1,), extra_flops=16),
        )
    )
    out.append(
        Program(
            "reduce_any_pred_16x64",
            lambda x: jnp.any(x, axis=1),
            (S((16, 64), pred),),
            F.reduction_formula((16, 64), (1,)),
        )
    )
    out.append(
        Program(
            "reduce_all_pred_16x64",
            lambda x: jnp.all(x, axis=0),
            (S((16, 64), pred),),
            F.reduction_formula((16, 64), (0,)),
        )
    )
    out.append(Program("argmax_f32_64x128", lambda x: jnp.argmax(x, axis=1), (S((64, 128)),), None))
    out.append(Program("argmin_f32_64x128", lambda x: jnp.argmin(x, axis=0), (S((64, 128)),), None))
    out.append(Program("argmax_s32_32x16", lambda x: jnp.argmax(x, axis=1), (S((32, 16), s32),), None))

    def variadic(x, y):  # one reduce with two operands and a two-op reducer body
        return lax.reduce((x, y), (0.0, 1.0), lambda a, b: (a[0] + b[0], a[1] * b[1]), (1,))

    out.append(
        Program(
            "reduce_variadic_sum_prod_f32_16x64",
            variadic,
            (S((16, 64)), S((16, 64))),
            # A variadic reduce is not split by the tree-reduction rewrite: one reduce, two flops each.
            {"reduce_flops": F.reduce_flops(1024, 16, reducer_flops=2), "flops": F.reduce_flops(1024, 16, 2)},
        )
    )
    out.append(Program("logsumexp_f32_16x64", lambda x: jax.nn.logsumexp(x, axis=1), (S((16, 64)),), None))
    out.append(Program("softmax_f32_64x128", lambda x: jax.nn.softmax(x, axis=-1), (S((64, 128)),), None))
    out.append(
        Program(
            "layernorm_f32_32x64",
            lambda x: (x - x.mean(-1, keepdims=True)) * lax.rsqrt(x.var(-1, keepdims=True) + 1e-5),
            (S((32, 64)),),
            None,
        )
    )
    return out


# ------------------------------------------------------------------------------------------------
# Reduce-window (pools, cumulative ops) and select-and-scatter (max-pool gradient)
# ------------------------------------------------------------------------------------------------


def _pool(x, init, op, window, strides, padding, window_dilation=None):
    return lax.reduce_window(x, init, op, window, strides, padding, window_dilation=window_dilation)


def _window_programs() -> list[Program]:
    out = []
    x = S((2, 16, 16, 8))
    pools = [
        ("maxpool_2x2_s2_valid", -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID", None),
        ("maxpool_3x3_s2_same", -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME", None),
        ("maxpool_3x3_s1_same", -jnp.inf, lax.max, (1, 3, 3, 1), (1, 1, 1, 1), "SAME", None),
        ("minpool_2x2_s1_valid", jnp.inf, lax.min, (1, 2, 2, 1), (1, 1, 1, 1), "VALID", None),
        ("sumpool_3x3_s1_same", 0.0, lax.add, (1, 3, 3, 1), (1, 1, 1, 1), "SAME", None),
        ("sumpool_explicit_pad", 0.0, lax.add, (1, 2, 3, 1), (1, 2, 1, 1), ((0, 0), (1, 0), (1, 1), (0, 0)), None),
        ("maxpool_window_dilation2", -jnp.inf, lax.max, (1, 2, 2, 1), (1, 1, 1, 1), "VALID", (1, 2, 2, 1)),
    ]
    for name, init, op, window, strides, padding, wd in pools:

        def fn(v, init=init, op=op, window=window, strides=strides, padding=padding, wd=wd):
            return _pool(v, init, op, window, strides, padding, wd)

        n_out = F.elements(jax.eval_shape(fn, x).shape)
        flops = F.reduce_window_flops(window, n_out)
        out.append(Program(f"{name}_f32", fn, (x,), {"reduce_window_flops": flops, "flops": flops}))

    def avgpool(v):
        return _pool(v, 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") / 4.0

    n_out = 2 * 8 * 8 * 8
    out.append(
        Program(
            "avgpool_2x2_s2_f32",
            avgpool,
            (x,),
            {
                "reduce_window_flops": F.reduce_window_flops((2, 2), n_out),
                "flops": F.reduce_window_flops((2, 2), n_out) + n_out,
            },
        )
    )
    for length in [10, 16]:
        flops = F.reduce_window_flops((length,), 4 * length)
        out.append(
            Program(
                f"cumsum_f32_4x{length}",
                lambda v: jnp.cumsum(v, axis=1),
                (S((4, length)),),
                {"reduce_window_flops": flops, "flops": flops},
            )
        )
    out.append(Program("cumsum_long_f32_4x1000", lambda v: jnp.cumsum(v, axis=1), (S((4, 1000)),), None))
    out.append(Program("cumprod_f32_4x12", lambda v: jnp.cumprod(v, axis=1), (S((4, 12)),), None))
    out.append(Program("cummax_f32_4x12", lambda v: lax.cummax(v, axis=1), (S((4, 12)),), None))
    out.append(Program("cumsum_s32_8x8_axis0", lambda v: jnp.cumsum(v, axis=0), (S((8, 8), s32),), None))

    def maxpool_loss(window, strides, padding):
        return lambda v: jnp.sum(_pool(v, -jnp.inf, lax.max, window, strides, padding))

    for name, window, strides, padding in [
        ("2x2_s2", (1, 2, 2, 1), (1, 2, 2, 1), "VALID"),
        ("3x3_s2_same", (1, 3, 3, 1), (1, 2, 2, 1), "SAME"),
        ("3x3_s1_same", (1, 3, 3, 1), (1, 1, 1, 1), "SAME"),
    ]:
        out.append(
            Program(
                f"select_and_scatter_maxpool_grad_{name}", jax.grad(maxpool_loss(window, strides, padding)), (x,), None
            )
        )
    return out


# ------------------------------------------------------------------------------------------------
# Sort, gather/scatter, dynamic slices, data movement
# ------------------------------------------------------------------------------------------------


def _sort_programs() -> list[Program]:
    out = [
        Program("sort_f32_100", jnp.sort, (S((100,)),), {"sort_flops": F.sort_flops(100), "flops": F.sort_flops(100)}),
        Program(
            "sort_f32_4x100_axis1",
            lambda x: jnp.sort(x, axis=1),
            (S((4, 100)),),
            {"sort_flops": F.sort_flops(400), "flops": F.sort_flops(400)},
        ),
        Program(
            "sort_f32_64x8_axis0",
            lambda x: jnp.sort(x, axis=0),
            (S((64, 8)),),
            {"sort_flops": F.sort_flops(512), "flops": F.sort_flops(512)},
        ),
        Program("sort_s32_1000", jnp.sort, (S((1000,), s32),), {"sort_flops": F.sort_flops(1000)}),
        Program("sort_bf16_128", jnp.sort, (S((128,), bf16),), {"sort_flops": F.sort_flops(128)}),
        Program("argsort_f32_4x50", lambda x: jnp.argsort(x, axis=1), (S((4, 50)),), {"sort_flops": F.sort_flops(200)}),
        Program(
            "sort_key_value_f32_s32_256",
            lambda k, v: lax.sort((k, v), num_keys=1),
            (S((256,)), S((256,), s32)),
            {"sort_flops": F.sort_flops(256)},
        ),
        Program("top_k_f32_8x64_k5", lambda x: lax.top_k(x, 5), (S((8, 64)),), None),
        Program("top_k_f32_1000_k1", lambda x: lax.top_k(x, 1), (S((1000,)),), None),
    ]
    return out


def _indexing_programs() -> list[Program]:
    a, idx = S((100, 64)), S((5,), s32)
    out = [
        Program("gather_rows_f32", lambda a, i: a[i], (a, idx), None),
        Program("gather_take_axis1_f32", lambda a, i: jnp.take(a, i, axis=1), (a, idx), None),
        Program(
            "gather_take_along_axis_f32", lambda a, i: jnp.take_along_axis(a, i, axis=1), (a, S((100, 3), s32)), None
        ),
        Program("gather_2d_points_f32", lambda a, i, j: a[i, j], (a, idx, idx), None),
        Program("gather_embedding_bf16", lambda e, t: e[t], (S((1000, 32), bf16), S((4, 16), s32)), None),
        Program("scatter_add_f32", lambda a, i, u: a.at[i].add(u), (a, idx, S((5, 64))), None),
        Program("scatter_set_f32", lambda a, i, u: a.at[i].set(u), (a, idx, S((5, 64))), None),
        Program("scatter_mul_f32", lambda a, i, u: a.at[i].multiply(u), (a, idx, S((5, 64))), None),
        Program("scatter_max_f32", lambda a, i, u: a.at[i].max(u), (a, idx, S((5, 64))), None),
        Program("scatter_add_s32", lambda a, i, u: a.at[i].add(u), (S((100, 64), s32), idx, S((5, 64), s32)), None),
        Program(
            "segment_sum_f32",
            lambda d, s: jax.ops.segment_sum(d, s, num_segments=8),
            (S((50, 16)), S((50,), s32)),
            None,
        ),
        Program("embedding_grad_f32", jax.grad(lambda e, t: jnp.sum(e[t] ** 2)), (S((200, 16)), S((4, 8), s32)), None),
        Program("dynamic_slice_f32", lambda a, i: lax.dynamic_slice(a, (i, 0), (4, 64)), (a, S((), s32)), None),
        Program(
            "dynamic_slice_in_dim_f32", lambda a, i: lax.dynamic_slice_in_dim(a, i, 8, axis=1), (a, S((), s32)), None
        ),
        Program(
            "dynamic_update_slice_f32",
            lambda a, u, i: lax.dynamic_update_slice(a, u, (i, 0)),
            (a, S((4, 64)), S((), s32)),
            None,
        ),
        Program("dynamic_index_f32", lambda a, i: a[i], (a, S((), s32)), None),
    ]
    return out


def _movement_programs() -> list[Program]:
    x = S((8, 16, 4))
    zero = {"flops": 0, "transcendentals": 0}
    return [
        Program("slice_f32", lambda v: v[2:6, ::2, 1:], (x,), dict(zero)),
        Program("pad_f32", lambda v: lax.pad(v, 0.0, ((1, 2, 0), (0, 0, 1), (2, 0, 0))), (x,), dict(zero)),
        Program("pad_negative_f32", lambda v: lax.pad(v, 1.0, ((-1, 2, 0), (0, -3, 0), (0, 0, 0))), (x,), dict(zero)),
        Program("concat_f32", lambda a, b: jnp.concatenate([a, b, a], axis=1), (x, x), dict(zero)),
        Program("reverse_f32", lambda v: lax.rev(v, (0, 2)), (x,), dict(zero)),
        Program("transpose_f32", lambda v: jnp.transpose(v, (2, 0, 1)), (x,), dict(zero)),
        Program("broadcast_in_dim_f32", lambda v: lax.broadcast_in_dim(v, (3, 8, 16, 4), (1, 2, 3)), (x,), dict(zero)),
        Program("reshape_f32", lambda v: v.reshape(32, 16), (x,), dict(zero)),
        Program("reshape_transpose_f32", lambda v: v.reshape(16, 32).T + 0.0, (x,), None),
        Program("iota_plus_f32", lambda v: v + lax.broadcasted_iota(f32, v.shape, 1), (x,), {"flops": 8 * 16 * 4}),
        Program("iota_s32", lambda: lax.iota(s32, 128), (), dict(zero)),
        Program("tile_f32", lambda v: jnp.tile(v, (2, 1, 3)), (x,), dict(zero)),
        Program("repeat_f32", lambda v: jnp.repeat(v, 2, axis=0), (x,), dict(zero)),
        Program("squeeze_expand_f32", lambda v: jnp.expand_dims(v[:, :1, :].squeeze(1), 0), (x,), dict(zero)),
        Program("copy_transpose_add_f32", lambda v: v.transpose(1, 0, 2) + 1.0, (x,), {"flops": 8 * 16 * 4}),
    ]


# ------------------------------------------------------------------------------------------------
# FFT, RNG, linalg
# ------------------------------------------------------------------------------------------------


def _fft_programs() -> list[Program]:
    def one_d(n_operand, length, exact):
        flops = F.fft_flops((length,), n_operand)
        return {"fft_flops": flops, "flops": flops} if exact else {"fft_flops": flops}

    return [
        Program("fft_c64_8x64", jnp.fft.fft, (S((8, 64), c64),), one_d(512, 64, True)),
        Program("ifft_c64_8x64", jnp.fft.ifft, (S((8, 64), c64),), one_d(512, 64, False)),
        Program("fft_c64_4x48", jnp.fft.fft, (S((4, 48), c64),), one_d(192, 48, True)),
        Program("rfft_f32_8x64", jnp.fft.rfft, (S((8, 64)),), one_d(512, 64, False)),
        Program("irfft_c64_8x33", lambda z: jnp.fft.irfft(z, n=64), (S((8, 33), c64),), one_d(8 * 33, 64, False)),
        Program("fft2_c64_4x16x16", jnp.fft.fft2, (S((4, 16, 16), c64),), None),
        Program("rfft2_f32_4x16x16", jnp.fft.rfft2, (S((4, 16, 16)),), None),
        Program("fftn_c64_8x8x8", jnp.fft.fftn, (S((8, 8, 8), c64),), None),
    ]


def _rng_programs() -> list[Program]:
    def threefry(fn):
        return lambda k: fn(jax.random.wrap_key_data(k, impl="threefry2x32"))

    def rbg(fn):
        return lambda k: fn(jax.random.wrap_key_data(k, impl="rbg"))

    k2, k4 = S((2,), u32), S((4,), u32)
    return [
        Program("rng_threefry_normal_f32", threefry(lambda k: jax.random.normal(k, (16, 16))), (k2,), None),
        Program("rng_threefry_uniform_f32", threefry(lambda k: jax.random.uniform(k, (256,))), (k2,), None),
        Program("rng_threefry_bernoulli", threefry(lambda k: jax.random.bernoulli(k, 0.3, (64,))), (k2,), None),
        Program(
            "rng_threefry_split_fold",
            threefry(lambda k: jax.random.key_data(jax.random.split(jax.random.fold_in(k, 3), 4))),
            (k2,),
            None,
        ),
        Program("rng_rbg_normal_f32", rbg(lambda k: jax.random.normal(k, (16, 16))), (k4,), None),
        Program("rng_rbg_uniform_f32", rbg(lambda k: jax.random.uniform(k, (256,))), (k4,), None),
        Program("rng_bit_generator_u32", lambda k: lax.rng_bit_generator(k, (8, 32), dtype=jnp.uint32), (k4,), None),
        Program("rng_permutation", threefry(lambda k: jax.random.permutation(k, 64)), (k2,), None),
    ]


def _linalg_programs() -> list[Program]:
    def spd(a):
        return a @ a.T + 8.0 * jnp.eye(a.shape[0], dtype=a.dtype)

    m = S((8, 8))
    return [
        Program("cholesky_f32_8", lambda a: jnp.linalg.cholesky(spd(a)), (m,), None),
        Program(
            "triangular_solve_f32_8", lambda a, b: jsp.linalg.solve_triangular(a, b, lower=True), (m, S((8, 4))), None
        ),
        Program("qr_f32_8x6", jnp.linalg.qr, (S((8, 6)),), None),
        Program("eigh_f32_8", lambda a: jnp.linalg.eigh(spd(a)), (m,), None),
        Program("solve_lu_f32_8", jnp.linalg.solve, (m, S((8, 3))), None),
        Program("inv_f32_8", jnp.linalg.inv, (m,), None),
        Program("svd_f32_8x6", lambda a: jnp.linalg.svd(a, full_matrices=False), (S((8, 6)),), None),
        Program("cholesky_grad_f32_8", jax.grad(lambda a: jnp.sum(jnp.linalg.cholesky(spd(a)))), (m,), None),
    ]


# ------------------------------------------------------------------------------------------------
# Control flow
# ------------------------------------------------------------------------------------------------


def _control_programs() -> list[Program]:
    x = S((32, 32))
    return [
        Program(
            "cond_matmul_or_add",
            lambda p, v: lax.cond(p, lambda v: jnp.exp(v) @ v, lambda v: v + 1.0, v),
            (S((), pred), x),
            None,
        ),
        Program("cond_on_data", lambda v: lax.cond(jnp.sum(v) > 0, jnp.sin, jnp.cos, v), (x,), None),
        Program(
            "switch_three_branches",
            lambda i, v: lax.switch(i, [jnp.sin, lambda u: u @ u, lambda u: u * 2.0], v),
            (S((), s32), x),
            None,
        ),
        Program(
            "cond_nested",
            lambda p, q, v: lax.cond(p, lambda v: lax.cond(q, jnp.tanh, jnp.exp, v), jnp.log, v),
            (S((), pred), S((), pred), x),
            None,
        ),
        Program(
            "while_fori_static_10", lambda v: lax.fori_loop(0, 10, lambda i, c: jnp.sin(c) * 2.0 + i, v), (x,), None
        ),
        Program(
            "while_fori_traced_bound", lambda n, v: lax.fori_loop(0, n, lambda i, c: c @ v, v), (S((), s32), x), None
        ),
        Program(
            "while_data_dependent",
            lambda v: lax.while_loop(lambda c: jnp.sum(c) < 1e6, lambda c: c * 2.0 + 1.0, v),
            (x,),
            None,
        ),
        Program(
            "while_two_counters",
            lambda v: lax.while_loop(lambda c: c[0] < 7, lambda c: (c[0] + 1, c[1] @ c[1] * 0.5), (0, v))[1],
            (x,),
            None,
        ),
        Program(
            "scan_length_20",
            lambda v: lax.scan(lambda c, _: (jnp.tanh(c) * 2.0, None), v, None, length=20)[0],
            (S((32,)),),
            None,
        ),
    ]


# ------------------------------------------------------------------------------------------------
# Gradient and checkpoint variants: the same forward function, differentiated whole and remat'd
# ------------------------------------------------------------------------------------------------


def _conv2d(x, w):
    return lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


GRAD_BASES = [
    ("tanh", lambda x: jnp.tanh(x), (S((16, 64)),)),
    ("exp", lambda x: jnp.exp(x), (S((16, 64)),)),
    ("logistic", jax.nn.sigmoid, (S((16, 64)),)),
    ("sin_cos", lambda x: jnp.sin(x) * jnp.cos(x), (S((16, 64)),)),
    ("log_softmax", lambda x: jax.nn.log_softmax(x, axis=-1), (S((16, 64)),)),
    ("matmul", lambda a, b: a @ b, (S((16, 32)), S((32, 8)))),
    ("mlp2", lambda x, w1, w2: jnp.tanh(jnp.tanh(x @ w1) @ w2), (S((8, 16)), S((16, 32)), S((32, 16)))),
    ("einsum_batch", lambda a, b: jnp.einsum("bij,bjk->bik", a, b), (S((4, 8, 16)), S((4, 16, 8)))),
    ("conv2d", _conv2d, (S((2, 8, 8, 4)), S((3, 3, 4, 8)))),
    ("sum_sq", lambda x: jnp.sum(x * x, axis=1), (S((16, 64)),)),
    ("max_reduce", lambda x: jnp.max(x, axis=1), (S((16, 64)),)),
    (
        "maxpool",
        lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID"),
        (S((2, 8, 8, 4)),),
    ),
    ("cumsum", lambda x: jnp.cumsum(x, axis=1), (S((4, 12)),)),
    ("sort", lambda x: jnp.sort(x, axis=1), (S((4, 32)),)),
    ("gather", lambda a: a[jnp.array([3, 1, 4, 1, 5])], (S((10, 8)),)),
    (
        "layernorm",
        lambda x: (x - x.mean(-1, keepdims=True)) * lax.rsqrt(x.var(-1, keepdims=True) + 1e-5),
        (S((8, 32)),),
    ),
    ("erf_pow", lambda x, y: lax.erf(x) + lax.pow(jnp.abs(y) + 1.0, x), (S((64,)), S((64,)))),
    ("cond", lambda x: lax.cond(jnp.sum(x) > 0, jnp.sin, jnp.tanh, x), (S((16, 16)),)),
    ("fft_abs", lambda x: jnp.abs(jnp.fft.rfft(x)), (S((4, 32)),)),
    ("bf16_matmul", lambda a, b: (a @ b).astype(f32), (S((16, 32), bf16), S((32, 8), bf16))),
]


def _grad_programs() -> list[Program]:
    out = []
    for name, fn, args in GRAD_BASES:
        argnums = tuple(range(len(args)))

        def loss(*a, fn=fn):
            return jnp.sum(fn(*a).astype(f32))

        def remat_loss(*a, fn=fn):
            return jnp.sum(jax.checkpoint(fn)(*a).astype(f32))

        out.append(Program(f"grad_{name}", jax.grad(loss, argnums=argnums), args, None))
        out.append(Program(f"remat_grad_{name}", jax.grad(remat_loss, argnums=argnums), args, None))
    return out


def _tagged(tag: str, programs: list[Program]) -> list[Program]:
    return [dataclasses.replace(p, tags=(tag, *p.tags)) for p in programs]


def more_programs() -> list[Program]:
    return (
        _tagged("reduce", _reduction_programs())
        + [
            dataclasses.replace(
                p, tags=("select_and_scatter" if p.name.startswith("select_and_scatter") else "reduce_window",)
            )
            for p in _window_programs()
        ]
        + _tagged("sort", _sort_programs())
        + _tagged("gather_scatter", _indexing_programs())
        + _tagged("movement", _movement_programs())
        + _tagged("fft", _fft_programs())
        + _tagged("rng", _rng_programs())
        + _tagged("linalg", _linalg_programs())
        + _tagged("control", _control_programs())
        + [dataclasses.replace(p, tags=("remat" if p.name.startswith("remat_") else "grad",)) for p in _grad_programs()]
    )
