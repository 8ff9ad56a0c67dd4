"""Small helpers the catalogues share for naming and declaring argument shapes."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

f32, bf16, f16, s32, c64, u8, s8 = jnp.float32, jnp.bfloat16, jnp.float16, jnp.int32, jnp.complex64, jnp.uint8, jnp.int8
f64, c128, u32 = jnp.float64, jnp.complex128, jnp.uint32
pred = jnp.bool_


def S(shape: tuple[int, ...], dtype: Any = f32) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(tuple(shape), jnp.dtype(dtype))


def dtype_name(dtype: Any) -> str:
    """HLO-style short names: float32 -> f32, int32 -> s32, complex64 -> c64, bool -> bool."""
    return (
        jnp.dtype(dtype)
        .name.replace("bfloat", "bf")
        .replace("float", "f")
        .replace("complex", "c")
        .replace("uint", "u")
        .replace("int", "s")
    )


def shape_name(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape)) or "scalar"
