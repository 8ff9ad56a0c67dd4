"""Building blocks of the loop catalogue: pair construction and whole-output losses."""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from tests.programs import LoopPair, Program
from tests.programs.jaxshapes import f32


def _all_argnums(args: tuple) -> tuple[int, ...]:
    return tuple(range(len(args)))


def _grad_all(loss: Callable, args: tuple) -> Callable:
    """value_and_grad with respect to every argument."""
    return jax.value_and_grad(loss, argnums=_all_argnums(args))


def make_pair(
    name: str,
    rolled: Callable,
    unrolled: Callable,
    args: tuple,
    notes: str,
    trip_counts: tuple[int, ...],
    *,
    grad: bool = False,
) -> LoopPair:
    if grad:
        rolled, unrolled = _grad_all(rolled, args), _grad_all(unrolled, args)
    return LoopPair(
        name=name,
        rolled=Program(f"loop_{name}_rolled", rolled, args),
        unrolled=Program(f"loop_{name}_unrolled", unrolled, args),
        notes=notes,
        trip_counts=trip_counts,
    )


def sum_loss(fn: Callable) -> Callable:
    """Sum every output leaf into one scalar loss."""

    def loss(*args):
        return sum(jnp.sum(leaf.astype(f32)) for leaf in jax.tree_util.tree_leaves(fn(*args)))

    return loss
