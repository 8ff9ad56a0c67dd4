"""The flax part of the loop catalogue: nn.scan and nn.remat_scan against Python loops over the
same parameters. Assembled into loop_programs.PAIRS.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from tests.programs import LoopPair
from tests.programs.jaxshapes import S
from tests.programs.loop_helpers import sum_loss, make_pair

# ------------------------------------------------------------------------------------------------
# flax: nn.scan and nn.remat_scan against Python loops over the same parameters
# ------------------------------------------------------------------------------------------------


class _Cell(nn.Module):
    features: int

    @nn.compact
    def __call__(self, c, x):
        c = jnp.tanh(nn.Dense(self.features)(c) + x)
        return c, jnp.sum(c, axis=-1)


class _MLP(nn.Module):
    """The seed-000 layer: Dense(d_ff), silu, Dense(d_model), residual."""

    d_model: int
    d_ff: int

    @nn.compact
    def __call__(self, x):
        return x + nn.Dense(self.d_model)(jax.nn.silu(nn.Dense(self.d_ff)(x)))


def flax_pairs() -> list[LoopPair]:
    out = []
    d, b, length = 8, 4, 6
    x0, xs = jnp.zeros((b, d)), jnp.zeros((length, b, d))

    shared = nn.scan(_Cell, variable_broadcast="params", split_rngs={"params": False})(features=d)
    shared_params = jax.eval_shape(lambda: shared.init(jax.random.PRNGKey(0), x0, xs))["params"]

    def shared_rolled(params, c, xs):
        return shared.apply({"params": params}, c, xs)

    def shared_unrolled(params, c, xs):
        ys = []
        for t in range(xs.shape[0]):
            c, y = _Cell(features=d).apply({"params": params}, c, xs[t])
            ys.append(y)
        return c, jnp.stack(ys)

    args = (shared_params, S((b, d)), S((length, b, d)))
    notes = f"nn.scan of a Dense cell over {length} steps, params broadcast (shared)"
    out.append(make_pair("nn_scan_shared", shared_rolled, shared_unrolled, args, notes, (length,)))
    out.append(
        make_pair(
            "nn_scan_shared_grad",
            sum_loss(shared_rolled),
            sum_loss(shared_unrolled),
            args,
            notes + "; value_and_grad w.r.t. params, carry and xs",
            (length,),
            grad=True,
        )
    )

    per_step = nn.scan(_Cell, variable_axes={"params": 0}, split_rngs={"params": True}, length=length)(features=d)
    per_step_params = jax.eval_shape(lambda: per_step.init(jax.random.PRNGKey(0), x0, xs))["params"]

    def per_step_rolled(params, c, xs):
        return per_step.apply({"params": params}, c, xs)

    def per_step_unrolled(params, c, xs):
        ys = []
        for t in range(xs.shape[0]):
            layer = jax.tree_util.tree_map(lambda p, t=t: p[t], params)
            c, y = _Cell(features=d).apply({"params": layer}, c, xs[t])
            ys.append(y)
        return c, jnp.stack(ys)

    args = (per_step_params, S((b, d)), S((length, b, d)))
    out.append(
        make_pair(
            "nn_scan_per_step_params_grad",
            sum_loss(per_step_rolled),
            sum_loss(per_step_unrolled),
            args,
            f"nn.scan with params stacked on axis 0 ({length} layers); value_and_grad w.r.t. everything",
            (length,),
            grad=True,
        )
    )

    d_model, d_ff = 10, 40
    for lengths in [(4, 1), (8, 1), (2, 3), (3, 2)]:

        class Stack(nn.Module):
            lengths: tuple[int, ...]

            @nn.compact
            def __call__(self, x):
                return nn.remat_scan(_MLP, lengths=self.lengths)(d_model=d_model, d_ff=d_ff, name="stack")(x)

        model = Stack(lengths=lengths)
        params = jax.eval_shape(lambda model=model: model.init(jax.random.PRNGKey(0), jnp.zeros((b, d_model))))
        params = params["params"]

        def rolled(params, x, model=model):
            return model.apply({"params": params}, x)

        def unrolled(params, x, lengths=lengths):
            for idx in np.ndindex(*lengths):
                layer = jax.tree_util.tree_map(lambda p, idx=idx: p[idx], params["stack"])
                x = _MLP(d_model=d_model, d_ff=d_ff).apply({"params": layer}, x)
            return x

        name = "x".join(map(str, lengths))
        out.append(
            make_pair(
                f"nn_remat_scan_{name}_grad",
                sum_loss(rolled),
                sum_loss(unrolled),
                (params, S((b, d_model))),
                f"nn.remat_scan(MLP, lengths={lengths}) (seed 000 layer) against a Python loop over the "
                "stacked params without remat; value_and_grad w.r.t. params and x",
                lengths,
                grad=True,
            )
        )
    return out
