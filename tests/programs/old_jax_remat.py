"""The remat programs whose HLO tests/data/remat_old_jax/ stores as old jax releases print it, each
with its twin without the remat wrapper. They run on every jax from 0.4.13 on (flax 0.7.2 and
later), so this module is imported by tests/data/remat_old_jax/generate.py inside a venv of an old
jax and by tests/compat/test_oldest_jax.py on whatever jax is installed; jax is imported only
when a program is built.

- `seed000`: seed 000's train step (examples/make_examples.py): 24 layers of a Dense-silu-Dense
  MLP with a residual, batch 8, d_model 10, d_ff 40, value_and_grad, optax sgd; with remat it is
  `nn.remat_scan(MLP, lengths=(24, 1))`, without it the same nesting of `nn.scan`s (what
  remat_scan builds, less its `remat`).
- `checkpoint_scan`: the same MLP stack in plain jax, `lax.scan` over `jax.checkpoint(layer)`,
  against the scan of the bare layer; grad of a mean square.
- `user_remat_name`: no remat at all, but a flax submodule NAMED `remat` (and one `remat_0`):
  a user's name that must not be taken for jax's remat frame.
"""

from __future__ import annotations

from typing import Any, Callable

BATCH, D_MODEL, D_FF, LAYERS = 8, 10, 40, 24
DENSE = 2 * BATCH * D_MODEL * D_FF  # one Dense of the MLP (10 -> 40 or 40 -> 10)
PAIRS = ("seed000", "checkpoint_scan")
SINGLES = ("user_remat_name",)

Step = tuple[Callable, tuple, dict[str, Any]]  # (fn, args, jit options)


def _mlp_module():
    import flax.linen as nn
    import jax

    class MLP(nn.Module):
        d_model: int
        d_ff: int

        @nn.compact
        def __call__(self, x):
            af1 = nn.Dense(self.d_ff)(x)
            af2 = nn.Dense(self.d_model)(jax.nn.silu(af1))
            return x + af2

    return MLP


def seed000(remat: bool) -> Step:
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import optax
    from flax.training.train_state import TrainState

    MLP = _mlp_module()
    lengths = (LAYERS, 1)

    class ScanMLP(nn.Module):
        @nn.compact
        def __call__(self, x, _):
            return MLP(D_MODEL, D_FF)(x), None

    class NestedScan(nn.Module):
        lengths: tuple

        @nn.compact
        def __call__(self, x, _=None):
            cls = ScanMLP if len(self.lengths) == 1 else NestedScan
            scanned = nn.scan(cls, variable_axes={"params": 0}, split_rngs={"params": True}, length=self.lengths[0])
            module = scanned() if len(self.lengths) == 1 else scanned(self.lengths[1:])
            x, _ = module(x, None)
            return x, None

    class StackedMLPs(nn.Module):
        @nn.compact
        def __call__(self, x):
            if remat:
                return nn.remat_scan(MLP, lengths=lengths)(d_model=D_MODEL, d_ff=D_FF, name="stack")(x)
            return NestedScan(lengths, name="stack")(x)[0]

    model = StackedMLPs()

    def loss_fn(params, batch):
        predictions = model.apply({"params": params}, batch["inputs"])
        return jnp.mean(optax.l2_loss(targets=batch["targets"], predictions=predictions))

    def train_step(state, batch):
        loss, grads = jax.value_and_grad(loss_fn)(state.params, batch)
        return state.apply_gradients(grads=grads), loss

    x = jax.ShapeDtypeStruct((BATCH, D_MODEL), jnp.float32)
    batch = {"inputs": x, "targets": x}

    def make_state():
        params = model.init({"params": jax.random.PRNGKey(2)}, jnp.zeros(x.shape, x.dtype))["params"]
        return TrainState.create(apply_fn=None, params=params, tx=optax.sgd(learning_rate=0.01))

    return train_step, (jax.eval_shape(make_state), batch), {"donate_argnums": (0,)}


def checkpoint_scan(remat: bool) -> Step:
    import jax
    import jax.numpy as jnp

    def layer(x, p):
        h = jax.nn.silu(x @ p["w1"] + p["b1"])
        return x + (h @ p["w2"] + p["b2"])

    body = jax.checkpoint(layer) if remat else layer

    def loss(params, x):
        y, _ = jax.lax.scan(lambda c, p: (body(c, p), None), x, params)
        return jnp.mean(y ** 2)

    shapes = {"w1": (LAYERS, D_MODEL, D_FF), "b1": (LAYERS, D_FF),
              "w2": (LAYERS, D_FF, D_MODEL), "b2": (LAYERS, D_MODEL)}
    params = {k: jax.ShapeDtypeStruct(s, jnp.float32) for k, s in shapes.items()}
    return jax.value_and_grad(loss), (params, jax.ShapeDtypeStruct((BATCH, D_MODEL), jnp.float32)), {}


def user_remat_name() -> Step:
    """A model whose submodules a user called `remat` and `remat_0`, trained without any remat."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    class Model(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = x + nn.Dense(D_MODEL, name="remat")(jnp.tanh(nn.Dense(D_FF, name="remat_0")(x)))
            return nn.Dense(D_MODEL, name="out")(jax.nn.silu(x))

    model = Model()
    x = jax.ShapeDtypeStruct((BATCH, D_MODEL), jnp.float32)
    params = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), jnp.zeros(x.shape, x.dtype)))["params"]

    def step(params, x):
        return jax.value_and_grad(lambda p: jnp.mean(model.apply({"params": p}, x) ** 2))(params)

    return step, (params, x), {}


def build(name: str) -> Step:
    """`name` is `<pair>_remat`, `<pair>_plain` or a single program's name."""
    if name in SINGLES:
        return user_remat_name()
    pair, _, which = name.rpartition("_")
    if pair not in PAIRS or which not in ("remat", "plain"):
        raise KeyError(name)
    return {"seed000": seed000, "checkpoint_scan": checkpoint_scan}[pair](which == "remat")


def names() -> list[str]:
    return [f"{pair}_{which}" for pair in PAIRS for which in ("remat", "plain")] + list(SINGLES)
