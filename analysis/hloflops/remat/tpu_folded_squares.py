"""A variance's folded linearization coefficient in a TPU backward loop (after optimization).

hloflops.remat.folded_coefficients describes the fold: jax linearizes `d * d` as `g * (2 * d)`;
the program without remat computes the coefficient `2 * d` in its forward loop and saves it into a
stack, while the program with remat recomputes the square beside the gradient reading it, where
XLA moves the `2` into the reduced cotangent's broadcast (`d * broadcast(2 * s)`). One full-size
multiply runs in the program without remat only, so the square's recompute there is model FLOPs
in the per-opcode sum. hloflops.remat.twin_saves gives it back together with its copy accounting,
which TPU programs skip (their fusions nest the recompute's chains otherwise); the fold itself does
not rest on fusion. On TPU it is given back where the square's own recompute is
counted: where a TPU rule already left it uncounted (an offload policy's draw, tpu seed 49), giving
back another multiply of its size would give it back twice. Centred or not: Haiku's `jnp.var`,
`mean(square(x - mean))` in an hk.layer_stack loop (tpu seed 1), and flax's uncentred
`mean(x * x) - mean(x) ** 2` in a linen scan (tpu seed 10, once hloflops.remat.backward_loop_copies
joins the layer norm output's unit-dimension copy to its copies: before, that copy's miss hid this
one) fold alike."""

from __future__ import annotations

from hloflops.remat.folded_coefficients import folded_squares
from hloflops.remat.sites import SiteKey, SiteOp
from hloparse.ir import Module


def tpu_folded_square_offsets(module: Module, ops: list[SiteOp], remat: set[SiteKey]) -> set[SiteKey]:
    """Counted recomputes to give back (model FLOPs): each counted, folded square in a backward loop
    body (module docstring)."""
    out: set[SiteKey] = set()
    for square, _ in folded_squares(module, ops):
        if square.key in remat:
            out.add(square.key)
    return out

