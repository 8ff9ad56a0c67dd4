"""Compiles and runs a train step, then fails with exit code 3 (a crash after some steps)."""

import sys

import jax
import jax.numpy as jnp


@jax.jit
def train_step(w, x):
    return w - 0.1 * jax.grad(lambda w: jnp.sum(jnp.tanh(x @ w) ** 2))(w)


w = train_step(jnp.ones((64, 64)), jnp.ones((32, 64)))
w.block_until_ready()
print("step done; now failing", flush=True)
sys.exit(3)
