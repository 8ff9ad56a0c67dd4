"""Compiles and runs a train step, then is interrupted half way as Ctrl-C in a terminal does it:
SIGINT to the whole foreground process group (this script and the `hloflops run` above it).
`jit_never_compiled` is never reached."""

import os
import signal
import time

import jax
import jax.numpy as jnp


@jax.jit
def train_step(w, x):
    return w - 0.1 * jax.grad(lambda w: jnp.sum(jnp.tanh(x @ w) ** 2))(w)


w = train_step(jnp.ones((64, 64)), jnp.ones((32, 64)))
w.block_until_ready()
print("step done; Ctrl-C", flush=True)
os.killpg(os.getpgrp(), signal.SIGINT)
time.sleep(30)  # KeyboardInterrupt arrives here


def never_compiled(x):
    return x + 1


jax.jit(never_compiled)(w)  # never reached
