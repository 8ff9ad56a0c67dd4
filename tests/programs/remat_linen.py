"""Flax linen models of the remat forms (tests/programs/remat_forms.py), sized by a `Form`.

Architectures: `lm` (a transformer LM: embedding, blocks of self-attention + MLP, a head),
`mlp` (a residual MLP stack), `conv` (a conv net of residual 3x3 conv blocks on `tokens` x `tokens`
images), `encdec` (an encoder-decoder with cross-attention in each decoder
block), `bilstm` (a BiLSTM tagger of `nn.RNN`s). Forms:
`linen_loop` (`nn.remat` per block in a Python loop), `linen_scan` (`nn.scan(nn.remat(Block))`),
`linen_remat_scan` (`nn.remat_scan` against the same `nn.scan`), `linen_whole` (`nn.remat`
around the whole model), `linen_nested` (`nn.remat` blocks inside an `nn.remat`'d stack) and
`whole_model_checkpoint` (`jax.checkpoint` around `model.apply`: no remat inside the model).
"""

from __future__ import annotations

from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

VOCAB = 64


def _remat(f, module: Callable) -> Callable:
    from tests.programs.remat_forms import POLICIES

    policy = POLICIES[f.policy]
    return nn.remat(module, prevent_cse=f.prevent_cse, policy=policy() if policy else None)


def model(f, remat: bool) -> tuple[nn.Module, tuple]:
    """The linen model of `f` (its remat wrapper on where `remat`) and its input shapes."""
    from tests.programs.remat_forms import ACTIVATIONS
    d, heads, hidden = f.width, f.heads, f.hidden
    dtype = jnp.dtype(f.dtype)

    class Attention(nn.Module):
        @nn.compact
        def __call__(self, x, memory):
            k_dim = d // heads
            q = nn.Dense(d, dtype=dtype, name="query")(x).reshape(x.shape[:2] + (heads, k_dim))
            k, v = (nn.Dense(d, dtype=dtype, name=n)(memory).reshape(memory.shape[:2] + (heads, k_dim))
                    for n in ("key", "value"))
            weights = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(k_dim).astype(dtype), axis=-1)
            o = jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape(x.shape)
            return nn.Dense(d, dtype=dtype, name="out")(o)

    # The MLP stack draws its activation (`f.act`), as the other forms' MLPs do; a transformer's MLP
    # keeps gelu.
    act = ACTIVATIONS[f.act] if f.arch == "mlp" else jax.nn.gelu

    class Mlp(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = checkpoint_name(nn.Dense(hidden, dtype=dtype)(x), "hidden")
            return nn.Dense(d, dtype=dtype)(act(h))

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x, memory=None):
            if f.arch == "mlp":
                return x + Mlp(name="mlp")(x)
            if f.arch == "conv":  # a residual block of two 3x3 convolutions, `hidden` channels inside
                h = checkpoint_name(nn.Conv(hidden, (3, 3), dtype=dtype)(x), "hidden")
                return x + nn.Conv(d, (3, 3), dtype=dtype)(jax.nn.relu(h))
            h = nn.LayerNorm(dtype=dtype)(x)
            x = x + Attention(name="self_attn")(h, h)
            if memory is not None:
                x = x + Attention(name="cross_attn")(nn.LayerNorm(dtype=dtype)(x), memory)
            return x + Mlp(name="mlp")(nn.LayerNorm(dtype=dtype)(x))

    class ScanBlock(nn.Module):
        @nn.compact
        def __call__(self, x, _):
            return Block(name="block")(x), None

    inner_remat = remat and f.form in ("linen_loop", "linen_nested")
    stack_remat = remat and f.form == "linen_nested"
    block_cls = _remat(f, Block) if inner_remat else Block

    class Stack(nn.Module):
        @nn.compact
        def __call__(self, x, memory=None):
            if f.form == "linen_scan":
                cls = _remat(f, ScanBlock) if remat else ScanBlock
                x, _ = nn.scan(cls, variable_axes={"params": 0}, split_rngs={"params": True},
                               length=f.layers)(name="blocks")(x, None)
                return x
            if f.form == "linen_remat_scan":
                if remat:
                    return nn.remat_scan(Block, lengths=(f.layers, 1))(name="blocks")(x)
                x, _ = nn.scan(ScanBlock, variable_axes={"params": 0}, split_rngs={"params": True},
                               length=f.layers)(name="blocks")(x, None)
                return x
            for i in range(f.layers):
                x = block_cls(name=f"block_{i}")(x, memory) if memory is not None else block_cls(name=f"block_{i}")(x)
            return x

    stack_cls = _remat(f, Stack) if stack_remat else Stack

    if f.arch == "bilstm":
        class Tagger(nn.Module):
            @nn.compact
            def __call__(self, tokens):
                cell = _remat(f, nn.OptimizedLSTMCell) if remat else nn.OptimizedLSTMCell
                x = nn.Embed(VOCAB, d, dtype=dtype)(tokens)
                fwd = nn.RNN(cell(d, dtype=dtype, name="forward_cell"), name="forward")(x)
                bwd = nn.RNN(cell(d, dtype=dtype, name="backward_cell"), reverse=True, keep_order=True,
                             name="backward")(x)
                return nn.Dense(5, dtype=dtype, name="tags")(jnp.concatenate([fwd, bwd], axis=-1))

        return Tagger(), (jax.ShapeDtypeStruct((f.batch, f.tokens), jnp.int32),)

    if f.arch == "encdec":
        class EncoderDecoder(nn.Module):
            @nn.compact
            def __call__(self, src, tgt):
                embed = nn.Embed(VOCAB, d, dtype=dtype, name="embed")
                memory = embed(src)
                for i in range(2):
                    memory = Block(name=f"encoder_{i}")(memory)
                y = stack_cls(name="decoder")(embed(tgt), nn.LayerNorm(dtype=dtype)(memory))
                return nn.Dense(VOCAB, dtype=dtype)(y)

        cls: Any = _remat(f, EncoderDecoder) if remat and f.form == "linen_whole" else EncoderDecoder
        tokens = jax.ShapeDtypeStruct((f.batch, f.tokens), jnp.int32)
        return cls(), (tokens, tokens)

    if f.arch == "conv":
        class ConvNet(nn.Module):  # images of `tokens` x `tokens` pixels, 3 channels, 10 classes
            @nn.compact
            def __call__(self, images):
                x = stack_cls(name="stack")(nn.Conv(d, (3, 3), dtype=dtype, name="stem")(images))
                return nn.Dense(10, dtype=dtype, name="classes")(jnp.mean(x, axis=(1, 2)))

        cls = _remat(f, ConvNet) if remat and f.form == "linen_whole" else ConvNet
        return cls(), (jax.ShapeDtypeStruct((f.batch, f.tokens, f.tokens, 3), dtype),)

    if f.arch == "mlp":
        class MlpModel(nn.Module):
            @nn.compact
            def __call__(self, x):
                return stack_cls(name="stack")(x)

        cls = _remat(f, MlpModel) if remat and f.form == "linen_whole" else MlpModel
        return cls(), (jax.ShapeDtypeStruct((f.batch, f.width), dtype),)

    class LM(nn.Module):
        @nn.compact
        def __call__(self, tokens):
            x = nn.Embed(VOCAB, d, dtype=dtype)(tokens)
            return nn.Dense(VOCAB, dtype=dtype)(stack_cls(name="decoder")(x))

    cls = _remat(f, LM) if remat and f.form == "linen_whole" else LM
    return cls(), (jax.ShapeDtypeStruct((f.batch, f.tokens), jnp.int32),)
