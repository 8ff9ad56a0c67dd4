"""Train steps written the way nnx, Equinox and plain-jax users write them, for the tests of
`hloflops.user_code` (tests/report/test_user_code.py): this file is the "user's code".

jax writes every Python frame of an op's call stack into the module except its own and the
standard library's. Where site-packages lies inside the standard library's folder (pyenv, the
system python) jax drops flax's and optax's frames too; in a virtual environment they stay, and
the innermost frame of a dense layer is flax/nnx/nn/linear.py. `library_frames()` gives the
virtual environment's view here (jax's own `register_inclusion`), so that the modules carry the
library frames a user of a venv sees.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator

D, LAYERS, BATCH = 16, 3, 4


@contextlib.contextmanager
def library_frames(*modules: Any) -> Iterator[None]:
    """Lower with these packages' frames kept in the call stacks (as in a virtual environment)."""
    from jax._src import source_info_util as info

    added = [os.path.dirname(m.__file__) + os.sep for m in modules]
    before = list(info._include_paths)
    for path in added:
        info.register_inclusion(path)
    try:
        yield
    finally:
        info._include_paths[:] = before
        info._include_path_regex.cache_clear()
        info.is_user_filename.cache_clear()


def nnx_train_step() -> tuple[Any, tuple]:
    """nnx.scan over nnx.vmap-built blocks, nnx.remat, adam via optax, nnx.jit: (jitted, args)."""
    import jax.numpy as jnp
    import optax
    from flax import nnx

    class Block(nnx.Module):
        def __init__(self, rngs: nnx.Rngs):
            self.up = nnx.Linear(D, 2 * D, rngs=rngs)
            self.down = nnx.Linear(2 * D, D, rngs=rngs)

        def __call__(self, x):
            return x + self.down(nnx.relu(self.up(x)))

    class Model(nnx.Module):
        def __init__(self, rngs: nnx.Rngs):
            @nnx.split_rngs(splits=LAYERS)
            @nnx.vmap(in_axes=(0,), out_axes=0)
            def make(rngs):
                return Block(rngs)

            self.blocks = make(rngs)
            self.head = nnx.Linear(D, 1, rngs=rngs)

        def __call__(self, x):
            @nnx.remat
            def body(x, block):
                return block(x)

            x = nnx.scan(body, in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)(x, self.blocks)
            return self.head(x)

    def loss_fn(model, x, y):
        return jnp.mean((model(x) - y) ** 2)

    @nnx.jit
    def train_step(model, optimizer, x, y):
        loss, grads = nnx.value_and_grad(loss_fn)(model, x, y)
        optimizer.update(model, grads)
        return loss

    model = Model(nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    return train_step, (model, optimizer, jnp.ones((BATCH, D)), jnp.ones((BATCH, 1)))


def equinox_train_step() -> tuple[Any, tuple]:
    """An Equinox MLP stack under lax.scan, adam via optax, eqx.filter_jit: (jitted, args)."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import optax

    class Block(eqx.Module):
        up: eqx.nn.Linear
        down: eqx.nn.Linear

        def __init__(self, key):
            k1, k2 = jax.random.split(key)
            self.up = eqx.nn.Linear(D, 2 * D, key=k1)
            self.down = eqx.nn.Linear(2 * D, D, key=k2)

        def __call__(self, x):
            return x + self.down(jax.nn.relu(self.up(x)))

    class Model(eqx.Module):
        blocks: Block
        head: eqx.nn.Linear

        def __init__(self, key):
            keys = jax.random.split(key, LAYERS + 1)
            self.blocks = eqx.filter_vmap(Block)(keys[:LAYERS])
            self.head = eqx.nn.Linear(D, 1, key=keys[-1])

        def __call__(self, x):
            params, static = eqx.partition(self.blocks, eqx.is_array)

            def body(x, p):
                return eqx.combine(p, static)(x), None

            x, _ = jax.lax.scan(body, x, params)
            return self.head(x)

    def loss_fn(model, x, y):
        return jnp.mean((jax.vmap(model)(x) - y) ** 2)

    optimizer = optax.adam(1e-3)

    @eqx.filter_jit
    def train_step(model, opt_state, x, y):
        loss, grads = eqx.filter_value_and_grad(loss_fn)(model, x, y)
        updates, opt_state = optimizer.update(grads, opt_state, eqx.filter(model, eqx.is_array))
        return eqx.apply_updates(model, updates), opt_state, loss

    model = Model(jax.random.PRNGKey(0))
    opt_state = optimizer.init(eqx.filter(model, eqx.is_array))
    return train_step, (model, opt_state, jnp.ones((BATCH, D)), jnp.ones((BATCH, 1)))


def plain_jax_train_step() -> tuple[Any, tuple]:
    """Plain jax: a scan over stacked weights with jax.checkpoint, a fori_loop of gradient
    accumulation, adam via optax, jax.jit: (jitted, args)."""
    import jax
    import jax.numpy as jnp
    import optax

    def layer(x, w):
        return jnp.tanh(x @ w["up"]) @ w["down"] + x

    def forward(params, x):
        x, _ = jax.lax.scan(lambda h, w: (jax.checkpoint(layer)(h, w), None), x, params["blocks"])
        return x @ params["head"]

    def loss_fn(params, x, y):
        return jnp.mean((forward(params, x) - y) ** 2)

    optimizer = optax.adam(1e-3)

    @jax.jit
    def train_step(params, opt_state, xs, ys):
        def micro(i, grads):
            g = jax.grad(loss_fn)(params, xs[i], ys[i])
            return jax.tree.map(jnp.add, grads, g)

        grads = jax.lax.fori_loop(0, xs.shape[0], micro, jax.tree.map(jnp.zeros_like, params))
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    params = {"blocks": {"up": jnp.ones((LAYERS, D, 2 * D)) * 0.01, "down": jnp.ones((LAYERS, 2 * D, D)) * 0.01},
              "head": jnp.ones((D, 1))}
    return train_step, (params, optimizer.init(params), jnp.ones((2, BATCH, D)), jnp.ones((2, BATCH, 1)))
