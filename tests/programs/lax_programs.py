"""A catalogue of small jax programs covering every lax op family (see `PROGRAMS`).

Families are generated from tables (ops x shapes x dtypes x options). `formula` holds hand-formula
counts where one exists (keys documented in tests/programs/__init__.py); `None` where the count
depends on XLA:CPU rewrites we do not want to pin here (custom-calls, expansions, index clamps).
"""

from __future__ import annotations

import dataclasses

from typing import Callable

import jax
import jax.numpy as jnp
from jax import lax

from tests.programs import Program
from tests.programs import formulas as F

from tests.programs.jaxshapes import S, bf16, c64, f16, f32, f64, pred, s8, s32, u8
from tests.programs.jaxshapes import dtype_name as _dt
from tests.programs.jaxshapes import shape_name as _shape_name

# ------------------------------------------------------------------------------------------------
# Elementwise
# ------------------------------------------------------------------------------------------------

# The 15 opcodes XLA counts as transcendental, reached through their jax spelling.
TRANSCENDENTAL_UNARY: dict[str, Callable] = {
    "exp": lax.exp,
    "log": lax.log,
    "logistic": jax.nn.sigmoid,
    "sqrt": lax.sqrt,
    "cbrt": lax.cbrt,
    "rsqrt": lax.rsqrt,
    "tanh": lax.tanh,
    "sin": lax.sin,
    "cos": lax.cos,
    "expm1": lax.expm1,
    "log1p": lax.log1p,
    "tan": lax.tan,
    "erf": lax.erf,
}
TRANSCENDENTAL_BINARY: dict[str, Callable] = {"pow": lax.pow, "atan2": lax.atan2}
# XLA:CPU expands logistic before costing: 3 flops + 1 transcendental per element.
EXTRA_FLOPS_PER_ELEMENT = {"logistic": 3}


def _transcendental_programs() -> list[Program]:
    out = []
    cases = [(s, f32) for s in [(128,), (16, 64), (4, 8, 16)]] + [((16, 64), bf16), ((16, 64), f16)]
    for name, fn in {**TRANSCENDENTAL_UNARY, **TRANSCENDENTAL_BINARY}.items():
        arity = 2 if name in TRANSCENDENTAL_BINARY else 1
        for shape, dtype in cases:
            n = F.elements(shape)
            formula = {"transcendentals": n}
            if dtype == f32:
                formula["flops"] = EXTRA_FLOPS_PER_ELEMENT.get(name, 0) * n
            out.append(Program(f"{name}_{_dt(dtype)}_{_shape_name(shape)}", fn, (S(shape, dtype),) * arity, formula))
    for name in ["exp", "log", "sqrt", "sin", "tanh"]:  # complex: XLA:CPU expands these into real math
        out.append(Program(f"{name}_c64_64", TRANSCENDENTAL_UNARY[name], (S((64,), c64),), None))
    for name in ["exp", "tanh", "sqrt"]:
        out.append(
            Program(
                f"{name}_f64_64",
                TRANSCENDENTAL_UNARY[name],
                (S((64,), f64),),
                {"transcendentals": 64, "flops": 0},
                x64=True,
            )
        )
    return out


ARITH_BINARY: dict[str, Callable] = {
    "add": lax.add,
    "sub": lax.sub,
    "mul": lax.mul,
    "div": lax.div,
    "max": lax.max,
    "min": lax.min,
    "rem": lax.rem,
}
ARITH_UNARY: dict[str, Callable] = {
    "neg": lax.neg,
    "abs": lax.abs,
    "sign": lax.sign,
    "floor": lax.floor,
    "ceil": lax.ceil,
    "round": lax.round,
    "is_finite": lax.is_finite,
    "reciprocal": lax.reciprocal,
}
INT_BINARY: dict[str, Callable] = {
    "add": lax.add,
    "mul": lax.mul,
    "div": lax.div,
    "max": lax.max,
    "and": lax.bitwise_and,
    "or": lax.bitwise_or,
    "xor": lax.bitwise_xor,
    "shl": lax.shift_left,
    "shr_logical": lax.shift_right_logical,
    "shr_arith": lax.shift_right_arithmetic,
}
INT_UNARY: dict[str, Callable] = {
    "not": lax.bitwise_not,
    "popcnt": lax.population_count,
    "clz": lax.clz,
    "neg": lax.neg,
}
BOOL_BINARY: dict[str, Callable] = {"and": lax.bitwise_and, "or": lax.bitwise_or, "xor": lax.bitwise_xor}
COMPARE: dict[str, Callable] = {"lt": lax.lt, "le": lax.le, "eq": lax.eq, "ne": lax.ne, "gt": lax.gt, "ge": lax.ge}


def _arith_programs() -> list[Program]:
    out = []
    shape = (16, 64)
    n = F.elements(shape)
    one_each = {"flops": n, "transcendentals": 0}
    for name, fn in ARITH_BINARY.items():
        out.append(Program(f"{name}_f32_{_shape_name(shape)}", fn, (S(shape), S(shape)), dict(one_each)))
    for name in ["add", "mul", "div"]:
        out.append(Program(f"{name}_bf16_{_shape_name(shape)}", ARITH_BINARY[name], (S(shape, bf16),) * 2, None))
    for name, fn in ARITH_UNARY.items():
        out.append(Program(f"{name}_f32_{_shape_name(shape)}", fn, (S(shape),), dict(one_each)))
    out.append(Program("square_f32_16x64", lambda x: x * x, (S(shape),), dict(one_each)))
    out.append(Program("cube_f32_16x64", lambda x: x * x * x, (S(shape),), {"flops": 2 * n, "transcendentals": 0}))
    out.append(Program("fma_f32_16x64", lambda a, b, c: a * b + c, (S(shape),) * 3, {"flops": 2 * n}))
    for name, fn in INT_BINARY.items():
        out.append(
            Program(
                f"{name}_s32_{_shape_name(shape)}", fn, (S(shape, s32),) * 2, None if name == "div" else dict(one_each)
            )
        )
    for name, fn in INT_UNARY.items():
        out.append(Program(f"{name}_s32_{_shape_name(shape)}", fn, (S(shape, s32),), dict(one_each)))
    out.append(Program("add_u8_256", lax.add, (S((256,), u8),) * 2, {"flops": 256}))
    out.append(Program("mul_s8_256", lax.mul, (S((256,), s8),) * 2, {"flops": 256}))
    for name, fn in BOOL_BINARY.items():
        out.append(Program(f"{name}_pred_{_shape_name(shape)}", fn, (S(shape, pred),) * 2, dict(one_each)))
    out.append(Program("not_pred_16x64", lax.bitwise_not, (S(shape, pred),), dict(one_each)))
    for name, fn in COMPARE.items():
        out.append(Program(f"{name}_f32_{_shape_name(shape)}", fn, (S(shape),) * 2, dict(one_each)))
    for name in ["lt", "eq"]:
        out.append(Program(f"{name}_s32_{_shape_name(shape)}", COMPARE[name], (S(shape, s32),) * 2, dict(one_each)))
    out.append(Program("select_f32_16x64", lax.select, (S(shape, pred), S(shape), S(shape)), dict(one_each)))
    out.append(Program("where_s32_16x64", jnp.where, (S(shape, pred), S(shape, s32), S(shape, s32)), dict(one_each)))
    out.append(Program("clamp_f32_16x64", lambda lo, x, hi: lax.clamp(lo, x, hi), (S(shape),) * 3, dict(one_each)))
    out.append(Program("clamp_scalar_bounds_f32_16x64", lambda x: lax.clamp(-1.0, x, 1.0), (S(shape),), None))
    out.append(Program("clip_f32_16x64", lambda x: jnp.clip(x, -2.0, 3.0), (S(shape),), None))
    for src, dst in [(f32, s32), (s32, f32), (f32, bf16), (bf16, f32), (f32, f16), (u8, f32)]:
        out.append(
            Program(
                f"convert_{_dt(src)}_to_{_dt(dst)}_16x64",
                lambda x, dst=dst: lax.convert_element_type(x, dst),
                (S(shape, src),),
                dict(one_each),
            )
        )
    for name in ["add", "mul", "div"]:
        out.append(Program(f"{name}_c64_64", ARITH_BINARY[name], (S((64,), c64),) * 2, None))
    out.append(Program("real_imag_c64_64", lambda z: lax.real(z) + lax.imag(z), (S((64,), c64),), {"flops": 3 * 64}))
    out.append(Program("add_f64_64", lax.add, (S((64,), f64),) * 2, {"flops": 64}, x64=True))
    return out


# ------------------------------------------------------------------------------------------------
# Dot / einsum / matmul
# ------------------------------------------------------------------------------------------------


def _dot_formula(lhs_shape, out_shape, contracting_sizes, *, batch_only: bool = False) -> dict[str, int]:
    """2 * N(out) * K for a dot. When no operand has a free dimension (the output holds only batch
    dims), XLA rewrites the dot into multiply + reduce: N(lhs) multiplies and N(lhs) - N(out) adds,
    and no dot is left to count."""
    if batch_only:  # multiply N(lhs) elements, then reduce the contracting (minor) dims
        n_batch_dims = len(out_shape)
        reduced = tuple(range(n_batch_dims, len(lhs_shape)))
        return F.reduction_formula(lhs_shape, reduced, extra_flops=F.elements(lhs_shape))
    return {"dot_flops": F.dot_flops(out_shape, contracting_sizes)}


def _dot_programs() -> list[Program]:
    out = []
    for m, k, n in [(8, 16, 4), (64, 128, 32), (33, 17, 9), (1, 64, 16)]:
        flops = F.dot_flops((m, n), (k,))
        out.append(
            Program(f"matmul_f32_{m}x{k}x{n}", jnp.matmul, (S((m, k)), S((k, n))), {"dot_flops": flops, "flops": flops})
        )
    out.append(
        Program(
            "matvec_f32_64x32",
            jnp.dot,
            (S((64, 32)), S((32,))),
            {"dot_flops": F.dot_flops((64,), (32,)), "flops": F.dot_flops((64,), (32,))},
        )
    )
    # A dot with a single output element is rewritten by XLA into multiply + reduce: K multiplies
    # and K - 1 adds, so there is no dot left to count.
    for name, lhs, rhs, k in [("vecdot_f32_32", (32,), (32,), 32), ("matmul_f32_1x256x1", (1, 256), (256, 1), 256)]:
        out.append(Program(name, jnp.matmul, (S(lhs), S(rhs)), F.reduction_formula((k,), (0,), extra_flops=k)))
    out.append(
        Program(
            "matmul_rhs_transposed_f32_16x32x8",
            lambda a, b: a @ b.T,
            (S((16, 32)), S((8, 32))),
            {"dot_flops": F.dot_flops((16, 8), (32,))},
        )
    )
    einsums = [
        ("bij,bjk->bik", (8, 16, 32), (8, 32, 24), (8, 16, 24), (32,)),
        ("ijk,jkl->il", (8, 4, 6), (4, 6, 10), (8, 10), (4, 6)),
        ("bij,bij->b", (4, 8, 16), (4, 8, 16), (4,), (8, 16)),
        ("bhqd,bhkd->bhqk", (2, 4, 16, 8), (2, 4, 16, 8), (2, 4, 16, 16), (8,)),
        ("abcd,cdbe->ae", (3, 4, 5, 6), (5, 6, 4, 7), (3, 7), (4, 5, 6)),
    ]
    for spec, ls, rs, os_, contract in einsums:
        name = "einsum_" + spec.replace(",", "_").replace("->", "_to_")
        out.append(
            Program(
                name,
                lambda a, b, spec=spec: jnp.einsum(spec, a, b),
                (S(ls), S(rs)),
                _dot_formula(ls, os_, contract, batch_only=spec == "bij,bij->b"),
            )
        )
    gen = lax.dot_general
    out.append(
        Program(
            "dot_general_batch2_contract2_f32",
            lambda a, b: gen(a, b, (((2, 3), (2, 1)), ((0, 1), (0, 3)))),
            (S((2, 3, 4, 5)), S((2, 5, 4, 3))),
            _dot_formula((2, 3, 4, 5), (2, 3), (4, 5), batch_only=True),
        )
    )
    for dtype in [s32, bf16, f16, c64]:
        flops = F.dot_flops((16, 8), (32,))
        formula = {"dot_flops": flops, "flops": flops} if dtype in (s32, c64) else {"dot_flops": flops}
        out.append(
            Program(f"matmul_{_dt(dtype)}_16x32x8", jnp.matmul, (S((16, 32), dtype), S((32, 8), dtype)), formula)
        )
    out.append(
        Program(
            "matmul_bf16_preferred_f32_16x32x8",
            lambda a, b: jnp.matmul(a, b, preferred_element_type=f32),
            (S((16, 32), bf16), S((32, 8), bf16)),
            {"dot_flops": F.dot_flops((16, 8), (32,))},
        )
    )
    out.append(
        Program(
            "matmul_f64_16x32x8",
            jnp.matmul,
            (S((16, 32), f64), S((32, 8), f64)),
            {"dot_flops": F.dot_flops((16, 8), (32,)), "flops": F.dot_flops((16, 8), (32,))},
            x64=True,
        )
    )
    out.append(Program("outer_f32_16x8", jnp.outer, (S((16,)), S((8,))), None))
    out.append(
        Program(
            "dense_relu_f32_32x64x16",
            lambda x, w, b: jax.nn.relu(x @ w + b),
            (S((32, 64)), S((64, 16)), S((16,))),
            {"dot_flops": F.dot_flops((32, 16), (64,)), "flops": F.dot_flops((32, 16), (64,)) + 2 * 32 * 16},
        )
    )
    return out


# ------------------------------------------------------------------------------------------------
# Convolution
# ------------------------------------------------------------------------------------------------

LAYOUTS = {1: ("NWC", "WIO", "NWC"), 2: ("NHWC", "HWIO", "NHWC"), 3: ("NDHWC", "DHWIO", "NDHWC")}


def _conv_program(
    name: str,
    x_shape,
    w_shape,
    *,
    strides=None,
    padding="SAME",
    lhs_dilation=None,
    rhs_dilation=None,
    fgc: int = 1,
    bgc: int = 1,
    layout=None,
    dtype=f32,
    exact_total: bool = True,
) -> Program:
    """One conv_general_dilated; the formula is computed from the same geometry jax uses."""
    nsp = len(x_shape) - 2
    layout = layout or LAYOUTS[nsp]
    strides = tuple(strides or (1,) * nsp)
    lhs_dilation = tuple(lhs_dilation or (1,) * nsp)
    rhs_dilation = tuple(rhs_dilation or (1,) * nsp)

    def fn(x, w):
        return lax.conv_general_dilated(
            x,
            w,
            strides,
            padding,
            lhs_dilation,
            rhs_dilation,
            dimension_numbers=layout,
            feature_group_count=fgc,
            batch_group_count=bgc,
        )

    dn = lax.conv_dimension_numbers(x_shape, w_shape, layout)
    lhs_spatial = [x_shape[d] for d in dn.lhs_spec[2:]]
    rhs_spatial = [w_shape[d] for d in dn.rhs_spec[2:]]
    out_shape = jax.eval_shape(fn, S(x_shape, dtype), S(w_shape, dtype)).shape
    out_spatial = [out_shape[d] for d in dn.out_spec[2:]]
    if isinstance(padding, str):
        dilated_in = [(i - 1) * d + 1 for i, d in zip(lhs_spatial, lhs_dilation)]
        dilated_k = [(k - 1) * d + 1 for k, d in zip(rhs_spatial, rhs_dilation)]
        pads = lax.padtype_to_pads(dilated_in, dilated_k, strides, padding)
    else:
        pads = padding
    flops = F.conv_flops(
        batch=x_shape[dn.lhs_spec[0]],
        in_features=x_shape[dn.lhs_spec[1]],
        out_features=out_shape[dn.out_spec[1]],
        spatial_in=lhs_spatial,
        spatial_kernel=rhs_spatial,
        spatial_out=out_spatial,
        strides=strides,
        pads_lo=[p[0] for p in pads],
        lhs_dilation=lhs_dilation,
        rhs_dilation=rhs_dilation,
        feature_group_count=fgc,
        batch_group_count=bgc,
    )
    formula = {"conv_flops": flops, "flops": flops} if exact_total else {"conv_flops": flops}
    return Program(name, fn, (S(x_shape, dtype), S(w_shape, dtype)), formula)


def _conv_programs() -> list[Program]:
    x2, w2 = (2, 16, 16, 8), (3, 3, 8, 16)
    c = _conv_program
    out = [
        c("conv2d_same_s1", x2, w2),
        c("conv2d_valid_s1", x2, w2, padding="VALID"),
        c("conv2d_same_s2", x2, w2, strides=(2, 2)),
        c("conv2d_valid_s2", x2, w2, padding="VALID", strides=(2, 2)),
        c("conv2d_explicit_pad", x2, w2, padding=((1, 1), (2, 0))),
        c("conv2d_explicit_pad_s3", x2, w2, padding=((2, 1), (0, 3)), strides=(3, 2)),
        c("conv2d_rhs_dilation2", x2, w2, rhs_dilation=(2, 2)),
        c("conv2d_lhs_dilation2", x2, w2, lhs_dilation=(2, 2), padding=((2, 2), (2, 2))),
        c("conv2d_both_dilations", x2, w2, lhs_dilation=(2, 1), rhs_dilation=(1, 2), padding=((1, 1), (2, 2))),
        c("conv2d_5x5_same", (1, 12, 12, 4), (5, 5, 4, 8)),
        c("conv2d_1x1", x2, (1, 1, 8, 32)),
        c("conv2d_depthwise_fgc8", x2, (3, 3, 1, 16), fgc=8),
        c("conv2d_grouped_fgc2", x2, (3, 3, 4, 16), fgc=2),
        c("conv2d_batch_group2", (4, 8, 8, 4), (3, 3, 4, 8), bgc=2, padding="VALID"),
        c("conv2d_nchw", (2, 8, 16, 16), (16, 8, 3, 3), layout=("NCHW", "OIHW", "NCHW")),
        c(
            "conv2d_nchw_s2_valid",
            (2, 8, 16, 16),
            (16, 8, 3, 3),
            layout=("NCHW", "OIHW", "NCHW"),
            strides=(2, 2),
            padding="VALID",
        ),
        c("conv2d_kernel_larger_than_input", (1, 4, 4, 2), (5, 5, 2, 3), padding=((4, 4), (4, 4))),
        c("conv1d_same", (4, 32, 8), (5, 8, 16)),
        c("conv1d_valid_s2", (4, 32, 8), (5, 8, 16), padding="VALID", strides=(2,)),
        c("conv1d_causal", (4, 32, 8), (3, 8, 8), padding=((2, 0),)),
        c("conv3d_same", (2, 8, 8, 8, 4), (3, 3, 3, 4, 8)),
        c("conv3d_valid_s2", (2, 8, 8, 8, 4), (3, 3, 3, 4, 8), padding="VALID", strides=(2, 2, 2)),
        c("conv2d_bf16_same", x2, w2, dtype=bf16, exact_total=False),
    ]

    def conv_loss(x, w):
        y = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=LAYOUTS[2])
        return jnp.sum(y * y)

    def strided_loss(x, w):
        return jnp.sum(lax.conv_general_dilated(x, w, (2, 2), "SAME", dimension_numbers=LAYOUTS[2]) ** 2)

    def depthwise_loss(x, w):
        return jnp.sum(
            lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=LAYOUTS[2], feature_group_count=8) ** 2
        )

    def conv1d_loss(x, w):
        return jnp.sum(lax.conv_general_dilated(x, w, (1,), "VALID", dimension_numbers=LAYOUTS[1]) ** 2)

    out += [
        Program("conv2d_same_grad", jax.grad(conv_loss, argnums=(0, 1)), (S(x2), S(w2)), None),
        Program("conv2d_s2_grad", jax.grad(strided_loss, argnums=(0, 1)), (S(x2), S(w2)), None),
        Program("conv2d_depthwise_grad", jax.grad(depthwise_loss, argnums=(0, 1)), (S(x2), S((3, 3, 1, 16))), None),
        Program("conv1d_valid_grad", jax.grad(conv1d_loss, argnums=(0, 1)), (S((4, 32, 8)), S((5, 8, 16))), None),
    ]
    return out


# ------------------------------------------------------------------------------------------------
# The catalogue
# ------------------------------------------------------------------------------------------------


# Programs whose only flops are those of their one named op: what jax adds around it (transposes,
# reshapes, iota, copies) costs nothing, so the per-kind formula is also the whole-program total.
_SINGLE_OP_TOTALS = {
    "matmul_rhs_transposed_f32_16x32x8",
    "einsum_bij_bjk_to_bik",
    "einsum_ijk_jkl_to_il",
    "einsum_bhqd_bhkd_to_bhqk",
    "einsum_abcd_cdbe_to_ae",
    "sort_s32_1000",
    "argsort_f32_4x50",
    "sort_key_value_f32_s32_256",
    "ifft_c64_8x64",
    "rfft_f32_8x64",
    "irfft_c64_8x33",
}


def _with_single_op_total(program: Program) -> Program:
    if program.name not in _SINGLE_OP_TOTALS:
        return program
    (kind_value,) = [v for k, v in program.formula.items() if k.endswith("_flops")]
    return dataclasses.replace(program, formula={**program.formula, "flops": kind_value})


def _build() -> list[Program]:
    from tests.programs.lax_programs_more import _tagged, more_programs

    programs = (
        _tagged("transcendental", _transcendental_programs())
        + _tagged("elementwise", _arith_programs())
        + _tagged("dot", _dot_programs())
        + _tagged("conv", _conv_programs())
        + more_programs()
    )
    programs = [_with_single_op_total(p) for p in programs]
    missing = _SINGLE_OP_TOTALS - {p.name for p in programs}
    if missing:
        raise ValueError(f"unknown programs in _SINGLE_OP_TOTALS: {sorted(missing)}")
    names = [p.name for p in programs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"duplicate program names: {duplicates}")
    return programs


PROGRAMS: list[Program] = _build()
BY_NAME: dict[str, Program] = {p.name: p for p in PROGRAMS}
