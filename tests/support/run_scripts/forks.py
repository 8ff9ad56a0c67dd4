"""The parent compiles `step` and starts a worker process (multiprocessing, spawn) that compiles
`step` too and a `worker_only` function: every process dumps into the same directory."""

import multiprocessing

import jax
import jax.numpy as jnp


@jax.jit
def step(x):
    return jnp.sin(x) @ x


def worker_only(x):
    return jnp.cos(x).sum()


def worker() -> None:
    step(jnp.ones((32, 32))).block_until_ready()
    jax.jit(worker_only)(jnp.ones(8)).block_until_ready()  # a name only the worker compiles


if __name__ == "__main__":
    step(jnp.ones((32, 32))).block_until_ready()
    child = multiprocessing.get_context("spawn").Process(target=worker)
    child.start()
    child.join()
    print(f"worker exit code {child.exitcode}")
