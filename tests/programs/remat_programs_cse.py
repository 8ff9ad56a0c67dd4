"""Remat programs where XLA's CSE merges all or part of a recompute with its forward (issue 24).

Each is written the way users write it, with its twin without the remat wrapper: a transformer
LM under one whole-model `jax.checkpoint` of `model.apply`; an encoder-decoder with
cross-attention and `nn.remat` per decoder block (and the same nested in a remat'd stack of
decoder blocks); a BiLSTM tagger under `dots_with_no_batch_dims_saveable`; an unrolled plain-jax
transformer with `jax.checkpoint` per block; `lax.scan` over checkpointed layers with
`unroll=True`. `cse_pairs()` is added to the catalogue by `remat_programs.all_pairs`.
"""

from __future__ import annotations

from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from tests.programs import Program
from tests.programs.remat_programs import (
    CP, LM, TOKENS, B, Block, D, Decoder, H, RematPair, T, V, _fn_pair, _linen_pair, _plain_layer, _step,
)

S = 6  # source tokens of the encoder-decoder


# ---- whole-model jax.checkpoint around model.apply --------------------------------------------

def _whole_model_checkpoint() -> RematPair:
    model = LM(lambda name: Decoder(Block, name=name))
    params = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), jnp.zeros((B, T), jnp.int32)))["params"]

    def apply(p, tokens):
        return model.apply({"params": p}, tokens)

    programs = [Program(f"remat_lm_whole_model_checkpoint_{tag}", _step(fn, params), (params,) + TOKENS,
                        tags=("remat",))
                for tag, fn in (("remat", jax.checkpoint(apply)), ("plain", apply))]
    return RematPair("lm_whole_model_checkpoint", programs[0], programs[1],
                     "jax.checkpoint(model.apply) around a whole transformer LM")


# ---- encoder-decoder with cross-attention ------------------------------------------------------

class MultiHead(nn.Module):
    """Attention of `x` over `memory` (self-attention where memory is x)."""

    @nn.compact
    def __call__(self, x, memory):
        q = nn.Dense(D, name="query")(x).reshape(x.shape[0], x.shape[1], H, D // H)
        k, v = (nn.Dense(D, name=n)(memory).reshape(memory.shape[0], memory.shape[1], H, D // H)
                for n in ("key", "value"))
        weights = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(D // H), axis=-1)
        o = jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape(x.shape)
        return nn.Dense(D, name="out")(o)


class FeedForward(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(D)(nn.relu(nn.Dense(2 * D)(x)))


class EncoderBlock(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = x + MultiHead(name="self_attn")(nn.LayerNorm()(x), nn.LayerNorm()(x))
        return x + FeedForward(name="ff")(nn.LayerNorm()(x))


class DecoderBlock(nn.Module):
    @nn.compact
    def __call__(self, y, memory):
        h = nn.LayerNorm()(y)
        y = y + MultiHead(name="self_attn")(h, h)
        y = y + MultiHead(name="cross_attn")(nn.LayerNorm()(y), memory)
        return y + FeedForward(name="ff")(nn.LayerNorm()(y))


class DecoderStack(nn.Module):
    block: Callable

    @nn.compact
    def __call__(self, y, memory):
        for i in range(2):
            y = self.block(name=f"block_{i}")(y, memory)
        return y


class EncoderDecoder(nn.Module):
    block: Callable  # DecoderBlock, remat'd or not
    stack: Callable = DecoderStack  # DecoderStack, remat'd or not

    @nn.compact
    def __call__(self, src, tgt):
        embed = nn.Embed(V, D, name="embed")
        memory = embed(src)
        for i in range(2):
            memory = EncoderBlock(name=f"encoder_{i}")(memory)
        y = self.stack(self.block, name="decoder")(embed(tgt), nn.LayerNorm()(memory))
        return nn.Dense(V)(y)


SRC_TGT = (jax.ShapeDtypeStruct((B, S), jnp.int32), jax.ShapeDtypeStruct((B, T), jnp.int32))


def encoder_decoder_pairs() -> list[RematPair]:
    return [
        _linen_pair("encdec_block", lambda r: EncoderDecoder(nn.remat(DecoderBlock) if r else DecoderBlock),
                    SRC_TGT, "encoder-decoder, nn.remat per decoder block (self- and cross-attention)"),
        _linen_pair("encdec_nested", lambda r: EncoderDecoder(nn.remat(DecoderBlock) if r else DecoderBlock,
                                                              nn.remat(DecoderStack) if r else DecoderStack),
                    SRC_TGT, "encoder-decoder, nn.remat per decoder block inside an nn.remat'd decoder stack"),
    ]


# ---- BiLSTM tagger ------------------------------------------------------------------------------

class BiLstmTagger(nn.Module):
    remat: bool
    policy: Any = None

    @nn.compact
    def __call__(self, tokens):
        cell = nn.remat(nn.OptimizedLSTMCell, policy=self.policy) if self.remat else nn.OptimizedLSTMCell
        x = nn.Embed(V, D)(tokens)
        forward = nn.RNN(cell(D, name="forward_cell"), name="forward")(x)
        backward = nn.RNN(cell(D, name="backward_cell"), reverse=True, keep_order=True, name="backward")(x)
        return nn.Dense(5, name="tags")(jnp.concatenate([forward, backward], axis=-1))


def lstm_tagger_pairs() -> list[RematPair]:
    return [_linen_pair("bilstm_tagger_dots_no_batch",
                        lambda r: BiLstmTagger(r, CP.dots_with_no_batch_dims_saveable), TOKENS,
                        "BiLSTM tagger: nn.RNN forward and reversed over nn.remat(OptimizedLSTMCell, "
                        "policy=dots_with_no_batch_dims_saveable)")]


# ---- unrolled plain-jax transformer ---------------------------------------------------------------

def _layer_norm(x, scale, bias):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-6) * scale + bias


def _block(x, p):
    h = _layer_norm(x, p["ln1_scale"], p["ln1_bias"])
    q, k, v = (jnp.einsum("btd,dhk->bthk", h, p[n]) for n in ("wq", "wk", "wv"))
    weights = jax.nn.softmax(jnp.einsum("bqhk,bshk->bhqs", q, k) / jnp.sqrt(D // H), axis=-1)
    x = x + jnp.einsum("bhqs,bshk,hkd->bqd", weights, v, p["wo"])
    h = _layer_norm(x, p["ln2_scale"], p["ln2_bias"])
    return x + jax.nn.gelu(h @ p["w1"]) @ p["w2"]


def _block_params() -> dict[str, jax.ShapeDtypeStruct]:
    shapes = {"ln1_scale": (D,), "ln1_bias": (D,), "wq": (D, H, D // H), "wk": (D, H, D // H),
              "wv": (D, H, D // H), "wo": (H, D // H, D), "ln2_scale": (D,), "ln2_bias": (D,),
              "w1": (D, 4 * D), "w2": (4 * D, D)}
    return {k: jax.ShapeDtypeStruct(s, jnp.float32) for k, s in shapes.items()}


def _jax_transformer_pair() -> RematPair:
    params = {"embed": jax.ShapeDtypeStruct((V, D), jnp.float32), "blocks": [_block_params() for _ in range(3)],
              "head": jax.ShapeDtypeStruct((D, V), jnp.float32)}
    programs = []
    for remat in (True, False):
        block = jax.checkpoint(_block) if remat else _block

        def apply(p, tokens, block=block):
            x = p["embed"][tokens]
            for layer in p["blocks"]:
                x = block(x, layer)
            return x @ p["head"]

        programs.append(Program(f"remat_jax_transformer_checkpoint_{'remat' if remat else 'plain'}",
                                _step(apply, params), (params,) + TOKENS, tags=("remat",)))
    return RematPair("jax_transformer_checkpoint", programs[0], programs[1],
                     "plain-jax transformer, Python loop over 3 blocks, jax.checkpoint per block "
                     "(LayerNorm, einsum attention, MLP)")


# ---- lax.scan with unroll=True ----------------------------------------------------------------------

def _unrolled_scan(remat: bool):
    layer = jax.checkpoint(_plain_layer) if remat else _plain_layer

    def run(p, x):
        return jax.lax.scan(lambda c, w: (layer(c, *w), None), x, p, unroll=True)[0]

    return run


class TiedBlock(nn.Module):
    dense: nn.Module

    def __call__(self, x):
        return x + jnp.tanh(self.dense(x))


class TiedNet(nn.Module):
    """Seed 004's model: one Dense shared by four blocks (tied weights), each block remat'd."""

    remat: bool

    def setup(self):
        self.shared = nn.Dense(32)
        block = nn.remat(TiedBlock) if self.remat else TiedBlock
        self.blocks = [block(dense=self.shared) for _ in range(4)]

    def __call__(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def cse_pairs() -> list[RematPair]:
    return [_whole_model_checkpoint(), *encoder_decoder_pairs(), *lstm_tagger_pairs(), _jax_transformer_pair(),
            _fn_pair("mlp_checkpoint_in_scan_unrolled", _unrolled_scan,
                     "lax.scan(unroll=True) over a jax.checkpoint'd layer"),
            _linen_pair("tied_dense_blocks", TiedNet, (jax.ShapeDtypeStruct((8, 32), jnp.float32),),
                        "seed 004: remat'd blocks sharing one Dense; CSE merges each recomputed dot into its forward")]

