"""A small Flax training loop, the quick start of `hloflops run`:

    hloflops run -- python examples/train_mlp.py

An MLP whose 8 residual blocks are one `nn.scan` over `nn.remat`'d blocks (so the train step has
a forward loop, a backward loop and recomputation), trained for 3 steps of Adam on random data.
It runs in a few seconds on a CPU; `--steps`, `--layers`, `--batch` and `--width` change it.
"""

from __future__ import annotations

import argparse

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax


class Block(nn.Module):
    width: int

    @nn.compact
    def __call__(self, x, _):
        h = nn.gelu(nn.Dense(4 * self.width)(x))
        return x + nn.Dense(self.width)(h), None


class MLP(nn.Module):
    layers: int
    width: int

    @nn.compact
    def __call__(self, x):
        x = nn.Dense(self.width)(x)
        blocks = nn.scan(nn.remat(Block), variable_axes={"params": 0}, split_rngs={"params": True},
                         length=self.layers)
        x, _ = blocks(self.width, name="blocks")(x, None)
        return nn.Dense(1)(x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--width", type=int, default=32)
    args = parser.parse_args()

    model = MLP(layers=args.layers, width=args.width)
    x = jax.random.normal(jax.random.key(0), (args.batch, args.width))
    y = jnp.sum(x, axis=1, keepdims=True)
    params = model.init(jax.random.key(1), x)
    optimizer = optax.adam(1e-3)
    opt_state = optimizer.init(params)

    @jax.jit
    def train_step(params, opt_state, x, y):
        def loss_fn(p):
            return jnp.mean((model.apply(p, x) - y) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    for step in range(args.steps):
        params, opt_state, loss = train_step(params, opt_state, x, y)
        print(f"step {step}: loss {float(loss):.4f}")


if __name__ == "__main__":
    main()
