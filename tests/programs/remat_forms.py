"""Remat programs drawn from a configuration, each with its twin without the remat wrapper (issue 28).

A `Form` names how the layers run (a Python loop, `lax.scan`, `scan(unroll=True)`, gradient
accumulation, a whole-model checkpoint, nnx, Equinox, ...) with which wrapper and policy, on which
architecture and at which sizes. `build(form)` gives a `RematPair`: the training step (loss and
gradient, optionally an Adam update) of the model with its remat wrapper, and the same step with
the wrapper removed (same layers, same loops, same loss). Every size is a field, so that a
failing draw of the generator (tests/remat/test_remat_generated.py) prints a form that replays.

Sizes matter: XLA's CSE, fusion and algebraic simplifier decide differently at different sizes,
so these are drawn from a range that includes the public Flax examples' configs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

import jax
import jax.numpy as jnp

from tests.programs import Program
from tests.programs.remat_programs import RematPair

CP = jax.checkpoint_policies
POLICIES: dict[str, Callable[[], Any] | None] = {
    "none": None,  # the wrapper's default: nothing saved
    "nothing_saveable": lambda: CP.nothing_saveable,
    "dots_saveable": lambda: CP.dots_saveable,
    "dots_with_no_batch_dims_saveable": lambda: CP.dots_with_no_batch_dims_saveable,
    "save_only_these_names": lambda: CP.save_only_these_names("hidden"),
    # host offload: what a policy saves goes to pinned host memory and comes back for the backward
    # (on CPU, where device and host memory are one, XLA compiles them and moves nothing)
    "save_and_offload_only_these_names": lambda: CP.save_and_offload_only_these_names(
        names_which_can_be_saved=[], names_which_can_be_offloaded=["hidden"], offload_src="device",
        offload_dst="pinned_host"),
    "offload_dot_with_no_batch_dims": lambda: CP.offload_dot_with_no_batch_dims("device", "pinned_host"),
}


@dataclass(frozen=True)
class Form:
    """One drawn program. `form`: how the layers run; `arch`: what a layer is; `policy`: a key of
    `POLICIES`; `prevent_cse`: the wrapper's flag; sizes: batch, width, hidden (MLP), heads,
    tokens, layers, microbatches (gradient accumulation), `unroll` for scans (True, or an int)."""

    form: str
    arch: str = "mlp"
    policy: str = "none"
    prevent_cse: bool = True
    batch: int = 16
    width: int = 64
    hidden: int = 256
    heads: int = 4
    tokens: int = 16
    layers: int = 4
    micro: int = 4
    unroll: Any = 1
    adam: bool = False
    dtype: str = "float32"
    act: str = "tanh"
    head: bool = False  # a final Linear (nnx, Equinox)
    platform: str = "cpu"  # "tpu": compiled by libtpu for a v5e (tests/programs/remat_sharded.py)
    mesh: str = "single"  # on TPU: one device, "fsdp" or "tp" over a 2x2 v5e

    @property
    def name(self) -> str:
        fields = [f"{k}={v}" for k, v in self.__dict__.items() if v != getattr(DEFAULT, k) or k == "form"]
        return "remat_form(" + ",".join(fields) + ")"

    def with_(self, **changes: Any) -> Form:
        return replace(self, **changes)


DEFAULT = Form("python_loop")


# ---- layers as plain functions of (x, params) --------------------------------------------------

ACTIVATIONS = {"tanh": jnp.tanh, "gelu": jax.nn.gelu, "relu": jax.nn.relu, "silu": jax.nn.silu}


def _layer_norm(x):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-6)


def _mlp_layer(f: Form):
    from jax.ad_checkpoint import checkpoint_name

    act = ACTIVATIONS[f.act]

    def layer(x, p):
        h = checkpoint_name(x @ p["w1"], "hidden")
        return x + act(h) @ p["w2"]

    return layer


def _attn_layer(f: Form):
    heads = f.heads
    from jax.ad_checkpoint import checkpoint_name

    def layer(x, p):
        b, t, d = x.shape
        h = _layer_norm(x)
        q, k, v = (jnp.einsum("btd,dhk->bthk", h, p[n]) for n in ("wq", "wk", "wv"))
        s = jnp.einsum("bqhk,bshk->bhqs", q, k) / jnp.sqrt(jnp.asarray(d // heads, x.dtype))
        o = jnp.einsum("bhqs,bshk->bqhk", jax.nn.softmax(s, axis=-1), v)
        x = x + jnp.einsum("bqhk,hkd->bqd", o, p["wo"])
        hid = checkpoint_name(_layer_norm(x) @ p["w1"], "hidden")
        return x + jax.nn.gelu(hid) @ p["w2"]

    return layer


def _layer_shapes(f: Form) -> dict[str, tuple[int, ...]]:
    d, hd = f.width, f.hidden
    if f.arch == "mlp":
        return {"w1": (d, hd), "w2": (hd, d)}
    k = d // f.heads
    return {"wq": (d, f.heads, k), "wk": (d, f.heads, k), "wv": (d, f.heads, k), "wo": (f.heads, k, d),
            "w1": (d, hd), "w2": (hd, d)}


def _input(f: Form) -> jax.ShapeDtypeStruct:
    dtype = jnp.dtype(f.dtype)
    if f.arch == "mlp":
        return jax.ShapeDtypeStruct((f.batch, f.width), dtype)
    return jax.ShapeDtypeStruct((f.batch, f.tokens, f.width), dtype)


def _wrap(f: Form, fn: Callable) -> Callable:
    policy = POLICIES[f.policy]
    return jax.checkpoint(fn, prevent_cse=f.prevent_cse, policy=policy() if policy else None)


def _stacked(f: Form) -> dict[str, jax.ShapeDtypeStruct]:
    dtype = jnp.dtype(f.dtype)
    return {k: jax.ShapeDtypeStruct((f.layers,) + s, dtype) for k, s in _layer_shapes(f).items()}


def _loss_of(run: Callable) -> Callable:
    def loss(params, x):
        return jnp.mean(jnp.square(run(params, x).astype(jnp.float32)))

    return loss


def _train_step(loss: Callable, params: Any, f: Form) -> Callable:
    """value_and_grad of the loss; with `adam`, an optax Adam update of the parameters too."""
    if not f.adam:
        return jax.value_and_grad(loss)
    import optax

    tx = optax.adam(1e-3)

    def step(params, opt_state, x):
        value, grads = jax.value_and_grad(loss)(params, x)
        updates, opt_state = tx.update(grads, opt_state, params)
        return value, optax.apply_updates(params, updates), opt_state

    return step


def _program(f: Form, remat: bool, loss: Callable, params: Any, x: Any) -> Program:
    step = _train_step(loss, params, f)
    args: tuple = (params, x)
    if f.adam:
        import optax

        args = (params, jax.eval_shape(optax.adam(1e-3).init, params), x)
    return Program(f"{f.name}_{'remat' if remat else 'plain'}", step, args, tags=("remat",))


# ---- plain-jax forms ---------------------------------------------------------------------------

def _jax_run(f: Form, remat: bool) -> Callable:
    layer = _mlp_layer(f) if f.arch == "mlp" else _attn_layer(f)
    wrapped = _wrap(f, layer) if remat and f.form != "whole_model" else layer

    def layers_of(p, i):
        return {k: v[i] for k, v in p.items()}

    if f.form == "python_loop" or f.form == "whole_model":
        def run(p, x):
            for i in range(f.layers):
                x = wrapped(x, layers_of(p, i))
            return x
    elif f.form in ("scan", "scan_unrolled"):
        unroll = True if f.form == "scan_unrolled" and f.unroll == 1 else f.unroll

        def run(p, x):
            return jax.lax.scan(lambda c, w: (wrapped(c, w), None), x, p, unroll=unroll)[0]
    elif f.form == "fori_loop":
        def run(p, x):
            return jax.lax.fori_loop(0, f.layers, lambda i, c: wrapped(c, layers_of(p, i)), x)
    else:
        raise ValueError(f"not a plain-jax form: {f.form}")
    if f.form == "whole_model" and remat:
        return _wrap(f, run)
    return run


def _grad_accumulation(f: Form, remat: bool) -> Program:
    """A scan over `micro` microbatches of the layers (themselves a scan with `unroll`), the
    gradients summed; every scan unrolled with `unroll=True` where `f.unroll` is True."""
    inner = _jax_run(f.with_(form="scan" if f.unroll is not True else "scan_unrolled"), remat)
    params = _stacked(f)
    x = _input(f)
    xs = jax.ShapeDtypeStruct((f.micro,) + x.shape, x.dtype)
    loss = _loss_of(inner)

    def step(p, xs):
        def micro(acc, x):
            value, grads = jax.value_and_grad(loss)(p, x)
            return jax.tree_util.tree_map(jnp.add, acc, grads), value

        zeros = jax.tree_util.tree_map(jnp.zeros_like, p)
        grads, values = jax.lax.scan(micro, zeros, xs, unroll=f.unroll)
        return jnp.mean(values), grads

    return Program(f"{f.name}_{'remat' if remat else 'plain'}", step, (params, xs), tags=("remat",))


# ---- nnx ---------------------------------------------------------------------------------------

def _nnx_layer(f: Form):
    """The residual MLP layer both nnx forms stack (a class per form: its sizes are the draw's)."""
    from flax import nnx

    class Layer(nnx.Module):
        def __init__(self, rngs):
            self.up = nnx.Linear(f.width, f.hidden, rngs=rngs)
            self.down = nnx.Linear(f.hidden, f.width, rngs=rngs)

        def __call__(self, x):
            return x + self.down(ACTIVATIONS[f.act](self.up(x)))

    return Layer


def _nnx_program(f: Form, remat: bool) -> Program:
    from flax import nnx

    Layer = _nnx_layer(f)

    class Stack(nnx.Module):
        def __init__(self, rngs):
            self.layers = nnx.List([Layer(rngs) for _ in range(f.layers)])
            self.head = nnx.Linear(f.width, f.width, rngs=rngs) if f.head else None

    def call(layer, x):
        return layer(x)

    policy = POLICIES[f.policy]
    call = nnx.remat(call, prevent_cse=f.prevent_cse, policy=policy() if policy else None) if remat else call
    graphdef, state = nnx.split(nnx.eval_shape(lambda: Stack(nnx.Rngs(0))))

    def run(s, x):
        model = nnx.merge(graphdef, s)
        for layer in model.layers:
            x = call(layer, x)
        return model.head(x) if f.head else x

    return _program(f, remat, _loss_of(run), state, _input(f))


def _nnx_scan_program(f: Form, remat: bool) -> Program:
    """nnx's scan-over-layers idiom: the layers built by `nnx.vmap` (one stacked module) and run
    by `nnx.scan`, `nnx.remat` around the scanned step; the twin scans the same step unwrapped."""
    from flax import nnx

    Layer = _nnx_layer(f)

    class Stack(nnx.Module):
        def __init__(self, rngs):
            @nnx.split_rngs(splits=f.layers)
            @nnx.vmap(in_axes=(0,), out_axes=0)
            def create(rngs):
                return Layer(rngs)

            self.layers = create(rngs)

    def step(x, layer):
        return layer(x)

    policy = POLICIES[f.policy]
    if remat:
        step = nnx.remat(step, prevent_cse=f.prevent_cse, policy=policy() if policy else None)
    scanned = nnx.scan(step, in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
    graphdef, state = nnx.split(nnx.eval_shape(lambda: Stack(nnx.Rngs(0))))

    def run(s, x):
        return scanned(x, nnx.merge(graphdef, s).layers)

    return _program(f, remat, _loss_of(run), state, _input(f))


# ---- Haiku -------------------------------------------------------------------------------------

def _hk_program(f: Form, remat: bool) -> Program:
    """A Haiku MLP or transformer (`hk.MultiHeadAttention`) with `hk.remat` per block, the blocks
    in a Python loop (`hk_loop`) or in `hk.layer_stack` (`hk_layer_stack`, Haiku's scan over
    layers); the twin is the same model without `hk.remat`."""
    import haiku as hk
    from jax.ad_checkpoint import checkpoint_name

    dtype = jnp.dtype(f.dtype)

    def block(x):
        if f.arch == "mlp":
            h = checkpoint_name(hk.Linear(f.hidden)(x), "hidden")
            return x + hk.Linear(f.width)(ACTIVATIONS[f.act](h))
        h = hk.LayerNorm(-1, create_scale=True, create_offset=True)(x)
        attention = hk.MultiHeadAttention(f.heads, f.width // f.heads, w_init=hk.initializers.VarianceScaling(1.0))
        x = x + attention(h, h, h)
        h = checkpoint_name(hk.Linear(f.hidden)(hk.LayerNorm(-1, create_scale=True, create_offset=True)(x)), "hidden")
        return x + hk.Linear(f.width)(jax.nn.gelu(h))

    policy = POLICIES[f.policy]

    def net(x):
        # hk.remat only exists inside hk.transform
        layer = hk.remat(block, prevent_cse=f.prevent_cse, policy=policy() if policy else None) if remat else block
        if f.form == "hk_layer_stack":
            return hk.layer_stack(f.layers)(layer)(x)
        for _ in range(f.layers):
            x = layer(x)
        return x

    model = hk.without_apply_rng(hk.transform(net))
    x = _input(f)
    params = jax.eval_shape(model.init, jax.random.PRNGKey(0), jnp.zeros(x.shape, dtype))
    return _program(f, remat, _loss_of(model.apply), params, x)


# ---- Equinox -----------------------------------------------------------------------------------

def _eqx_program(f: Form, remat: bool) -> Program:
    import equinox as eqx

    class Block(eqx.Module):
        up: eqx.nn.Linear
        down: eqx.nn.Linear

        def __init__(self, key):
            k1, k2 = jax.random.split(key)
            self.up = eqx.nn.Linear(f.width, f.hidden, key=k1)
            self.down = eqx.nn.Linear(f.hidden, f.width, key=k2)

        def __call__(self, x):
            return x + jax.vmap(self.down)(ACTIVATIONS[f.act](jax.vmap(self.up)(x)))

    blocks = eqx.filter_eval_shape(lambda: [Block(k) for k in jax.random.split(jax.random.PRNGKey(0), f.layers)])
    params, static = eqx.partition(blocks, lambda leaf: isinstance(leaf, (jax.Array, jax.ShapeDtypeStruct)))

    def call(block, x):
        return block(x)

    policy = POLICIES[f.policy]
    call = eqx.filter_checkpoint(call, prevent_cse=f.prevent_cse, policy=policy() if policy else None) \
        if remat else call

    def run(p, x):
        for block in eqx.combine(p, static):
            x = call(block, x)
        return x

    return _program(f, remat, _loss_of(run), params, _input(f))


# ---- flax linen --------------------------------------------------------------------------------

def _linen_program(f: Form, remat: bool) -> Program:
    from tests.programs import remat_linen

    model, inputs = remat_linen.model(f, remat)
    concrete = tuple(jnp.zeros(s.shape, s.dtype) for s in inputs)
    params = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), *concrete))["params"]

    def loss(p, *xs):
        return jnp.mean(jnp.square(model.apply({"params": p}, *xs).astype(jnp.float32)))

    if f.form == "whole_model_checkpoint":
        inner = loss
        loss = _wrap(f, inner) if remat else inner
    step = jax.value_and_grad(loss)
    return Program(f"{f.name}_{'remat' if remat else 'plain'}", step, (params,) + inputs, tags=("remat",))


JAX_FORMS = ("python_loop", "scan", "scan_unrolled", "fori_loop", "whole_model")
LINEN_FORMS = ("linen_loop", "linen_scan", "linen_remat_scan", "linen_whole", "linen_nested",
               "whole_model_checkpoint")


def build(f: Form) -> RematPair:
    programs = []
    for remat in (True, False):
        if f.form in JAX_FORMS:
            run = _jax_run(f, remat)
            programs.append(_program(f, remat, _loss_of(run), _stacked(f), _input(f)))
        elif f.form == "grad_accumulation":
            programs.append(_grad_accumulation(f, remat))
        elif f.form == "nnx_loop":
            programs.append(_nnx_program(f, remat))
        elif f.form == "nnx_scan":
            programs.append(_nnx_scan_program(f, remat))
        elif f.form in ("hk_loop", "hk_layer_stack"):
            programs.append(_hk_program(f, remat))
        elif f.form == "eqx_list":
            programs.append(_eqx_program(f, remat))
        elif f.form in LINEN_FORMS:
            programs.append(_linen_program(f, remat))
        else:
            raise ValueError(f"unknown form {f.form!r}")
    if f.platform == "tpu":
        from tests.programs.remat_sharded import placed

        programs = [placed(p, f.mesh, f.layers, opt_state=f.adam) for p in programs]
    elif f.platform != "cpu":
        raise ValueError(f"unknown platform {f.platform!r}")
    return RematPair(f.name, programs[0], programs[1], f.name)
