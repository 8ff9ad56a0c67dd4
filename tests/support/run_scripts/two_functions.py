"""An init phase (random parameters), a jitted train step with a lax.scan over micro-batches,
and a jitted predict function compiled twice (two batch sizes). Prints the device count, so a
test can see that the user's XLA_FLAGS still apply under `hloflops run`."""

import jax
import jax.numpy as jnp

params = {"w": jax.random.normal(jax.random.key(0), (64, 64)), "b": jnp.zeros(64)}


def loss(p, x):
    return jnp.mean(jnp.tanh(x @ p["w"] + p["b"]) ** 2)


@jax.jit
def train_step(p, xs):
    def micro(g, x):
        return jax.tree.map(jnp.add, g, jax.grad(loss)(p, x)), None

    grads, _ = jax.lax.scan(micro, jax.tree.map(jnp.zeros_like, p), xs)
    return jax.tree.map(lambda a, g: a - 0.1 * g, p, grads)


@jax.jit
def predict(p, x):
    return jnp.tanh(x @ p["w"] + p["b"])


xs = jnp.ones((4, 32, 64))
for _ in range(2):
    params = train_step(params, xs)
predict(params, jnp.ones((8, 64))).block_until_ready()
predict(params, jnp.ones((16, 64))).block_until_ready()
print(f"devices {jax.device_count()}")
