"""Remat programs written the way users write them, each with its twin without the remat wrapper.

`PAIRS` lists `RematPair`s: `remat` is a training step (loss and gradient with respect to the
parameters) of a model with some form of rematerialization; `plain` is the same model with the
remat wrapper removed (same layers, same loops, same loss). Models: a transformer LM (4 blocks
of attention + MLP under `decoder`, with `Dense_0` both at the top and inside each block's
`mlp`), an MLP stack, an LSTM under `nn.scan`, a small conv net, and nnx layers. Shapes are tiny:
what is tested is which dots run twice, not speed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from tests.programs import Program

CP = jax.checkpoint_policies
V, D, H, T, B, NB = 32, 16, 2, 8, 2, 4  # vocab, width, heads, tokens, batch, blocks


@dataclass(frozen=True)
class RematPair:
    name: str
    remat: Program
    plain: Program
    notes: str


def _step(apply: Callable, params: Any, *inputs: Any) -> Callable:
    def step(params, *inputs):
        return jax.value_and_grad(lambda p: jnp.mean(apply(p, *inputs) ** 2))(params)

    return step


def _linen_pair(name: str, make: Callable[[bool], nn.Module], inputs: tuple, notes: str,
                method: Callable | None = None) -> RematPair:
    programs = []
    for remat in (True, False):
        model = make(remat)
        concrete = tuple(jnp.zeros(s.shape, s.dtype) for s in inputs)
        params = jax.eval_shape(lambda m=model: m.init(jax.random.PRNGKey(0), *concrete))["params"]

        def apply(p, *xs, m=model):
            return m.apply({"params": p}, *xs)

        programs.append(Program(f"remat_{name}_{'remat' if remat else 'plain'}",
                                _step(apply, params), (params,) + inputs, tags=("remat",)))
    return RematPair(name, programs[0], programs[1], notes)


# ---- transformer LM ---------------------------------------------------------------------------

class Attention(nn.Module):
    @nn.compact
    def __call__(self, x):
        q, k, v = (nn.Dense(D, name=n)(x).reshape(B, T, H, D // H) for n in ("query", "key", "value"))
        scores = checkpoint_name(jnp.einsum("bqhd,bkhd->bhqk", q, k), "scores")
        o = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v).reshape(B, T, D)
        return nn.Dense(D, name="out")(o)


class Mlp(nn.Module):
    @nn.compact
    def __call__(self, x):
        h = checkpoint_name(nn.Dense(4 * D)(x), "mlp_hidden")
        return nn.Dense(D)(jax.nn.gelu(h))


class Block(nn.Module):
    @nn.compact
    def __call__(self, x, deterministic: bool = True):
        x = x + Attention(name="attn")(nn.LayerNorm()(x))
        y = Mlp(name="mlp")(nn.LayerNorm()(x))
        return x + (y if deterministic else 0.5 * y)


class ScanBlock(nn.Module):
    @nn.compact
    def __call__(self, x, _):
        return Block(name="block")(x), None


class Decoder(nn.Module):
    block: Callable  # the Block class, remat'd or not
    scan: bool = False
    static: bool = False

    @nn.compact
    def __call__(self, x):
        if self.scan:
            x, _ = nn.scan(self.block, variable_axes={"params": 0}, split_rngs={"params": True},
                           length=NB)(name="blocks")(x, None)
            return x
        for i in range(NB):
            x = self.block(name=f"block_{i}")(x, True) if self.static else self.block(name=f"block_{i}")(x)
        return x


class LM(nn.Module):
    decoder: Callable[[], nn.Module]

    @nn.compact
    def __call__(self, tokens):
        x = nn.Embed(V, D)(tokens)
        return nn.Dense(V)(self.decoder(name="decoder")(x))


class InnerDecoder(nn.Module):
    """Two levels of remat: the decoder remat'd as a whole, each block remat'd inside it."""

    remat: bool

    @nn.compact
    def __call__(self, x):
        block = nn.remat(Block) if self.remat else Block
        for i in range(NB):
            x = block(name=f"block_{i}")(x)
        return x


TOKENS = (jax.ShapeDtypeStruct((B, T), jnp.int32),)


def _lm(block_remat: Callable[[type], type], *, scan: bool = False, static: bool = False):
    def make(remat: bool) -> nn.Module:
        base = ScanBlock if scan else Block
        block = block_remat(base) if remat else base
        return LM(lambda name: Decoder(block, scan=scan, static=static, name=name))

    return make


POLICIES = {
    "nothing_saveable": CP.nothing_saveable,
    "everything_saveable": CP.everything_saveable,
    "dots_saveable": CP.dots_saveable,
    "dots_with_no_batch_dims_saveable": CP.dots_with_no_batch_dims_saveable,
    "save_only_these_names": CP.save_only_these_names("mlp_hidden"),
    "save_any_names_but_these": CP.save_any_names_but_these("scores"),
    "offload_dot_with_no_batch_dims": CP.offload_dot_with_no_batch_dims("device", "pinned_host"),
}


def lm_pairs() -> list[RematPair]:
    out = [
        _linen_pair("lm_block", _lm(nn.remat), TOKENS, "nn.remat(Block) in a Python loop over 4 blocks"),
        _linen_pair("lm_block_no_prevent_cse", _lm(lambda b: nn.remat(b, prevent_cse=False)), TOKENS,
                    "nn.remat(Block, prevent_cse=False)"),
        _linen_pair("lm_block_static_argnums", _lm(lambda b: nn.remat(b, static_argnums=(2,)), static=True),
                    TOKENS, "nn.remat(Block, static_argnums=(2,)) with a Python bool argument"),
        _linen_pair("lm_scan_block", _lm(nn.remat, scan=True), TOKENS, "nn.scan(nn.remat(Block)) over 4 blocks"),
        _linen_pair("lm_scan_block_dots_no_batch",
                    _lm(lambda b: nn.remat(b, policy=CP.dots_with_no_batch_dims_saveable), scan=True), TOKENS,
                    "nn.scan(nn.remat(Block, policy=dots_with_no_batch_dims_saveable))"),
        _linen_pair("lm_whole_model", lambda remat: (nn.remat(LM) if remat else LM)(
            lambda name: Decoder(Block, name=name)), TOKENS, "nn.remat around the whole LM"),
        _linen_pair("lm_nested", lambda remat: LM(lambda name: (nn.remat(InnerDecoder) if remat else InnerDecoder)(
            remat, name=name)), TOKENS, "nn.remat(decoder) around nn.remat(Block): remat inside remat"),
    ]
    for policy_name, policy in POLICIES.items():
        out.append(_linen_pair(f"lm_block_{policy_name}", _lm(lambda b, p=policy: nn.remat(b, policy=p)), TOKENS,
                               f"nn.remat(Block, policy={policy_name}) in a Python loop"))
    return out


# ---- MLP stack --------------------------------------------------------------------------------

class Layer(nn.Module):
    @nn.compact
    def __call__(self, x):
        return x + nn.Dense(D)(jnp.tanh(nn.Dense(2 * D)(x)))


class ScanLayer(nn.Module):
    @nn.compact
    def __call__(self, x, _):
        return Layer()(x), None


class NestedScan(nn.Module):
    """Nested nn.scan over Layer (lengths outermost first): nn.remat_scan without the remat."""

    lengths: tuple[int, ...]

    @nn.compact
    def __call__(self, x, _=None):
        cls = ScanLayer if len(self.lengths) == 1 else NestedScan
        scanned = nn.scan(cls, variable_axes={"params": 0}, split_rngs={"params": True}, length=self.lengths[0])
        module = scanned() if len(self.lengths) == 1 else scanned(self.lengths[1:])
        x, _ = module(x, None)
        return x, None


class RematScanStack(nn.Module):
    lengths: tuple[int, ...]

    @nn.compact
    def __call__(self, x):
        return nn.remat_scan(Layer, lengths=self.lengths)(name="stack")(x)


class PlainScanStack(nn.Module):
    lengths: tuple[int, ...]

    @nn.compact
    def __call__(self, x):
        return NestedScan(self.lengths, name="stack")(x)[0]


class MlpStack(nn.Module):
    layer: Callable

    @nn.compact
    def __call__(self, x):
        for i in range(4):
            x = self.layer(name=f"layer_{i}")(x)
        return x


X = (jax.ShapeDtypeStruct((8, D), jnp.float32),)


def _plain_layer(x, w1, w2):
    return x + jnp.tanh(x @ w1) @ w2


def _fn_pair(name: str, body: Callable[[Callable], Callable], notes: str) -> RematPair:
    """A plain-jax MLP stack: params (4, D, 2D) and (4, 2D, D); `body(layer)` runs the layers."""
    params = (jax.ShapeDtypeStruct((4, D, 2 * D), jnp.float32), jax.ShapeDtypeStruct((4, 2 * D, D), jnp.float32))
    programs = []
    for remat in (True, False):
        run = body(remat)
        programs.append(Program(f"remat_{name}_{'remat' if remat else 'plain'}",
                                _step(lambda p, x, run=run: run(p, x), params), (params,) + X, tags=("remat",)))
    return RematPair(name, programs[0], programs[1], notes)


def _python_loop(wrap: Callable[[Callable], Callable],
                 plain: Callable[[Callable], Callable] = lambda f: f) -> Callable[[bool], Callable]:
    """Four layers in a Python loop: `wrap(layer)` with remat, `plain(layer)` without."""

    def body(remat: bool):
        layer = wrap(_plain_layer) if remat else plain(_plain_layer)

        def run(p, x):
            for i in range(4):
                x = layer(x, p[0][i], p[1][i])
            return x

        return run

    return body


def _scan_loop(wrap: Callable[[Callable], Callable]) -> Callable[[bool], Callable]:
    def body(remat: bool):
        layer = wrap(_plain_layer) if remat else _plain_layer

        def run(p, x):
            return jax.lax.scan(lambda c, w: (layer(c, *w), None), x, p)[0]

        return run

    return body


def _fori_loop(wrap: Callable[[Callable], Callable]) -> Callable[[bool], Callable]:
    def body(remat: bool):
        layer = wrap(_plain_layer) if remat else _plain_layer

        def run(p, x):
            return jax.lax.fori_loop(0, 4, lambda i, c: layer(c, p[0][i], p[1][i]), x)

        return run

    return body


def _named_layer(x, w1, w2):
    h = checkpoint_name(x @ w1, "hidden")
    return x + jnp.tanh(h) @ w2


def mlp_pairs() -> list[RematPair]:
    out = [
        _linen_pair("mlp_layer", lambda r: MlpStack(nn.remat(Layer) if r else Layer), X, "nn.remat(Layer) x4"),
        _linen_pair("mlp_whole_model", lambda r: (nn.remat(MlpStack) if r else MlpStack)(Layer), X,
                    "nn.remat around the whole MLP stack"),
        _fn_pair("mlp_checkpoint", _python_loop(jax.checkpoint), "jax.checkpoint(layer) in a Python loop"),
        _fn_pair("mlp_remat_alias_no_cse", _python_loop(lambda f: jax.remat(f, prevent_cse=False)),
                 "jax.remat(layer, prevent_cse=False) in a Python loop"),
        _fn_pair("mlp_checkpoint_dots_saveable", _python_loop(lambda f: jax.checkpoint(f, policy=CP.dots_saveable)),
                 "jax.checkpoint(layer, policy=dots_saveable)"),
        _fn_pair("mlp_checkpoint_static_argnums",
                 lambda r: (lambda p, x: _static_loop(r, p, x)), "jax.checkpoint(layer, static_argnums=(3,))"),
        _fn_pair("mlp_checkpoint_in_scan", _scan_loop(jax.checkpoint), "lax.scan with a jax.checkpoint body"),
        _fn_pair("mlp_checkpoint_in_scan_nothing_saveable",
                 _scan_loop(lambda f: jax.checkpoint(f, policy=CP.nothing_saveable)),
                 "lax.scan, jax.checkpoint(policy=nothing_saveable) body"),
        _fn_pair("mlp_checkpoint_in_fori_loop", _fori_loop(jax.checkpoint), "fori_loop with a checkpointed body"),
        _fn_pair("mlp_checkpoint_nested", _python_loop(lambda f: jax.checkpoint(_pairwise(jax.checkpoint(f))),
                                                       _pairwise),
                 "jax.checkpoint of two jax.checkpoint'd layers: remat inside remat"),
    ]
    for lengths in ((4, 1), (2, 2), (2, 3)):
        tag = "x".join(map(str, lengths))
        out.append(_linen_pair(f"mlp_remat_scan_{tag}",
                               lambda r, n=lengths: (RematScanStack if r else PlainScanStack)(n), X,
                               f"nn.remat_scan(Layer, lengths={lengths}) against the same nested nn.scan"))
    return out


def _static_loop(remat: bool, p, x):
    def layer(x, w1, w2, double):
        y = _plain_layer(x, w1, w2)
        return 2 * y if double else y

    layer = jax.checkpoint(layer, static_argnums=(3,)) if remat else layer
    for i in range(4):
        x = layer(x, p[0][i], p[1][i], i % 2 == 0)
    return x


def _pairwise(layer: Callable) -> Callable:
    """Run `layer` twice with the same weights (the outer checkpoint wraps both runs)."""
    return lambda x, w1, w2: layer(layer(x, w1, w2), w1, w2)


# ---- LSTM under nn.scan ------------------------------------------------------------------------

class Lstm(nn.Module):
    remat: bool
    policy: Any = None

    @nn.compact
    def __call__(self, xs):
        cell = nn.remat(nn.OptimizedLSTMCell, policy=self.policy) if self.remat else nn.OptimizedLSTMCell
        scan = nn.scan(cell, variable_broadcast="params", split_rngs={"params": False}, in_axes=1, out_axes=1)
        carry = (jnp.zeros((B, D)), jnp.zeros((B, D)))
        _, ys = scan(D, name="lstm")(carry, xs)
        return nn.Dense(4)(ys)


XS = (jax.ShapeDtypeStruct((B, 6, D), jnp.float32),)


def lstm_pairs() -> list[RematPair]:
    return [
        _linen_pair("lstm_scan", lambda r: Lstm(r), XS, "nn.scan(nn.remat(OptimizedLSTMCell)) over 6 steps"),
        _linen_pair("lstm_scan_dots_saveable", lambda r: Lstm(r, CP.dots_saveable), XS,
                    "nn.scan(nn.remat(OptimizedLSTMCell, policy=dots_saveable))"),
    ]


# ---- conv net ----------------------------------------------------------------------------------

class ConvBlock(nn.Module):
    @nn.compact
    def __call__(self, x):
        y = nn.Conv(8, (3, 3))(nn.relu(x))
        return x + nn.Conv(8, (3, 3))(jnp.tanh(y))


class ConvNet(nn.Module):
    block: Callable

    @nn.compact
    def __call__(self, x):
        x = nn.Conv(8, (3, 3))(x)
        for i in range(2):
            x = self.block(name=f"block_{i}")(x)
        return nn.Dense(4)(x.mean(axis=(1, 2)))


IMAGES = (jax.ShapeDtypeStruct((2, 8, 8, 3), jnp.float32),)


def conv_pairs() -> list[RematPair]:
    return [
        _linen_pair("conv_block", lambda r: ConvNet(nn.remat(ConvBlock) if r else ConvBlock), IMAGES,
                    "nn.remat(ConvBlock) x2"),
        _linen_pair("conv_block_dots_saveable",
                    lambda r: ConvNet(nn.remat(ConvBlock, policy=CP.dots_saveable) if r else ConvBlock), IMAGES,
                    "nn.remat(ConvBlock, policy=dots_saveable)"),
        _linen_pair("conv_whole_model", lambda r: (nn.remat(ConvNet) if r else ConvNet)(ConvBlock), IMAGES,
                    "nn.remat around the whole conv net"),
    ]


# ---- nnx ----------------------------------------------------------------------------------------

def nnx_pairs() -> list[RematPair]:
    from flax import nnx

    class NnxLayer(nnx.Module):
        def __init__(self, rngs):
            self.up = nnx.Linear(D, 2 * D, rngs=rngs)
            self.down = nnx.Linear(2 * D, D, rngs=rngs)

        def __call__(self, x):
            return x + self.down(jnp.tanh(self.up(x)))

    class NnxStack(nnx.Module):
        def __init__(self, rngs):
            self.layers = nnx.List([NnxLayer(rngs) for _ in range(4)])

    def loop_forward(remat: bool):
        call = nnx.remat(lambda layer, x: layer(x)) if remat else (lambda layer, x: layer(x))

        def run(model, x):
            for layer in model.layers:
                x = call(layer, x)
            return x

        return NnxStack, run

    def scan_forward(remat: bool):
        @nnx.split_rngs(splits=4)
        @nnx.vmap(in_axes=(0,), out_axes=0)
        def make(rngs):
            return NnxLayer(rngs)

        class Scanned(nnx.Module):
            def __init__(self, rngs):
                self.layers = make(rngs)

        def body(x, layer):
            return layer(x)

        def run(model, x):
            step = nnx.remat(body) if remat else body
            return nnx.scan(step, in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)(x, model.layers)

        return Scanned, run

    out = []
    for name, build, notes in (("nnx_remat_layer", loop_forward, "nnx.remat around each of 4 layers"),
                               ("nnx_scan_remat", scan_forward, "nnx.scan over an nnx.remat'd layer")):
        programs = []
        for remat in (True, False):
            cls, run = build(remat)
            graphdef, state = nnx.split(nnx.eval_shape(lambda cls=cls: cls(nnx.Rngs(0))))

            def apply(s, x, graphdef=graphdef, run=run):
                return run(nnx.merge(graphdef, s), x)

            programs.append(Program(f"remat_{name}_{'remat' if remat else 'plain'}", _step(apply, state),
                                    (state,) + X, tags=("remat",)))
        out.append(RematPair(name, programs[0], programs[1], notes))
    return out


def all_pairs() -> list[RematPair]:
    from tests.programs.remat_programs_cse import cse_pairs  # it builds on this module's models

    return lm_pairs() + mlp_pairs() + lstm_pairs() + conv_pairs() + nnx_pairs() + cse_pairs()


PAIRS = all_pairs()
BY_NAME = {p.name: p for p in PAIRS}
