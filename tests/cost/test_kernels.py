"""TopK, block-scaled dot, cuDNN conv graphs, author-estimated kernels, and the corpus: every module
holding one of the kernels of analysis/hloflops/cost/kernels.py or attention.py reports it counted."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import pytest

from hloflops.cost.kernels import op_group
from hloflops import analyze
from hloflops.cost import attention

ALWAYS_COUNTED = re.compile(r'custom_call_target="(te_fused_attn_(?:forward|backward)_ffi|__cudnn\$fmha\w+|TopK|'
                            r'__op\$block_scaled_dot)"')


def test_topk_is_xlas_sort_decomposition():
    topk = """HloModule topk
compare {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  ROOT gt = pred[] compare(a, b), direction=GT
}
compare_values {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT gt = pred[] compare(a, b), direction=GT
}
ENTRY main {
  x = f32[64,1000] parameter(0)
  ROOT topk = (f32[64,8], s32[64,8]) custom-call(x), custom_call_target="TopK", called_computations={compare_values}
}
"""
    # what XLA's TopkDecomposer writes instead: a sort of (x, iota) along the last dimension, sliced
    decomposed = """HloModule decomposed
compare {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  ROOT gt = pred[] compare(a, b), direction=GT
}
ENTRY main {
  x = f32[64,1000] parameter(0)
  iota = s32[64,1000] iota(), iota_dimension=1
  sort = (f32[64,1000], s32[64,1000]) sort(x, iota), dimensions={1}, to_apply=compare
  values = f32[64,1000] get-tuple-element(sort), index=0
  indices = s32[64,1000] get-tuple-element(sort), index=1
  top = f32[64,8] slice(values), slice={[0:64], [0:8]}
  top_indices = s32[64,8] slice(indices), slice={[0:64], [0:8]}
  ROOT out = (f32[64,8], s32[64,8]) tuple(top, top_indices)
}
"""
    fused, reference = analyze(topk), analyze(decomposed)
    assert fused.uncounted == ()
    assert fused.flops == reference.flops == 64000 * 16  # n * ceil(log2 n), XLA's sort rule
    (row,) = [r for r in fused.rows if r.opcode == "custom-call"]
    assert row.target == "TopK" and "sort" in row.note


def test_block_scaled_dot_is_the_dot_plus_one_scale_per_element():
    text = """HloModule mx
ENTRY main {
  lhs = f8e4m3fn[4,128,256] parameter(0)
  rhs = f8e4m3fn[4,96,256] parameter(1)
  lhs_scale = f8e8m0fnu[4,128,8] parameter(2)
  rhs_scale = f8e8m0fnu[4,96,8] parameter(3)
  ROOT result = f32[4,128,96] custom-call(lhs, rhs, lhs_scale, rhs_scale), custom_call_target="__op$block_scaled_dot"
}
"""
    dot = """HloModule dot
ENTRY main {
  lhs = f32[4,128,256] parameter(0)
  rhs = f32[4,96,256] parameter(1)
  ROOT result = f32[4,128,96] dot(lhs, rhs), lhs_batch_dims={0}, lhs_contracting_dims={2},
    rhs_batch_dims={0}, rhs_contracting_dims={2}
}
"""
    report = analyze(text)
    assert report.uncounted == ()
    assert report.flops == analyze(dot).flops + 4 * 128 * 256 + 4 * 96 * 256
    with_global = text.replace("rhs_scale)", "rhs_scale, g)").replace(
        "  ROOT", "  g = f32[] parameter(4)\n  ROOT")
    assert analyze(with_global).flops == report.flops + 4 * 128 * 96


def test_cudnn_conv_graph_counts_its_convolution(corpus_dir: Path):
    path = next(p for p in sorted((corpus_dir / "xla_cc_gpu").glob("*.hlo"))
                if '"__cudnn$convForward"' in p.read_text() and "window=" in p.read_text())
    text = path.read_text()
    forward = analyze(text)
    graph = analyze(text.replace('"__cudnn$convForward"', '"__cudnn$convForwardGraph"'))
    assert forward.flops > 0 and graph.flops == forward.flops and graph.uncounted == forward.uncounted


def test_pallas_tpu_cost_estimate_is_used_and_said_to_be_the_authors():
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0

    def f(x):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                              cost_estimate=pl.CostEstimate(flops=1024, transcendentals=7, bytes_accessed=8192))(x)

    text = jax.jit(f).trace(jnp.zeros((8, 128), jnp.float32)).lower(lowering_platforms=("tpu",)).as_text(dialect="hlo")
    report = analyze(text)
    assert (report.flops, report.transcendentals, report.bytes_accessed) == (1024, 7, 8192)
    (row,) = [r for r in report.rows if r.opcode == "custom-call"]
    assert row.target == "tpu_custom_call" and "kernel's author" in row.note
    assert report.to_dict(rows=True)["rows"][-1]["note"] == row.note


# ---- the corpus --------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def corpus_modules_with(corpus_dir: Path, pattern: str) -> tuple[Path, ...]:
    found = []
    for path in sorted(corpus_dir.rglob("*.hlo")):
        if "_malformed" not in path.parts and re.search(pattern, path.read_text(errors="replace")):
            found.append(path)
    return tuple(found)


def test_every_corpus_module_with_attention_topk_or_block_scaled_dot_counts_them(corpus_dir: Path):
    paths = corpus_modules_with(corpus_dir, ALWAYS_COUNTED.pattern)
    # 7 TE dumps, 7 cuDNN fmha tests, 8 with TopK (Mixtral is also a TE dump), 13 block-scaled dots
    assert len(paths) == 7 + 7 + 8 + 13 - 1
    attention_modules = 0
    for path in paths:
        report = analyze(str(path))
        targets = set(ALWAYS_COUNTED.findall(path.read_text()))
        assert not [u for u in report.uncounted if u.target in targets], path.name
        counted = {r.target for r in report.rows if r.target in targets and r.uncounted is None}
        assert counted == targets, path.name
        if any(attention.is_attention(t) for t in targets):
            attention_modules += 1
            assert report.by_opcode() and "attention" in {g.key for g in report.by_opcode()}
            assert "custom-call" not in {g.key for g in report.by_opcode()} or any(
                not attention.is_attention(r.target) for r in report.rows if r.opcode == "custom-call")
    assert attention_modules == 7 + 7


def test_corpus_gemms_and_convolutions_are_counted_unless_their_config_is_missing(corpus_dir: Path):
    paths = corpus_modules_with(corpus_dir, r'custom_call_target="__(cublas\$\w|cudnn\$conv)')
    assert paths
    for path in paths:
        for u in analyze(str(path)).uncounted:
            if u.target and (u.target.startswith("__cublas$") or u.target.startswith("__cudnn$conv")):
                assert "cannot read its dimensions" in u.reason, (path.name, u.reason)


def test_corpus_mosaic_gpu_kernels_say_why_they_are_uncounted(corpus_dir: Path):
    paths = corpus_modules_with(corpus_dir, r'custom_call_target="mosaic_gpu')
    assert len(paths) == 3
    for path in paths:
        reasons = [u.reason for u in analyze(str(path)).uncounted if u.target.startswith("mosaic_gpu")]
        assert reasons and all("carries no cost estimate" in r for r in reasons)


@pytest.mark.parametrize("name,attention_flops", [
    # 32 layers x (forward + backward), B=2, 32 query heads (8 KV heads), S=8192, D=128,
    # padding-causal with runtime lengths: counted at full length, S(S+1)/2 entries per head
    ("tools__benchmarks__hlo__hlo_llama31_8b_bf16_2x8.hlo",
     32 * (2 * 32 * 8192 * 8193 // 2 * (4 * 128 + 5 + 6 * 128 + 4 * 128 + 7) - 2 * 2 * 32 * 8192)),
])
def test_llama_attention_share(name, attention_flops, corpus_dir: Path):
    report = analyze(str(corpus_dir / "xla_benchmark_models" / name))
    group = {g.key: g for g in report.by_opcode()}["attention"]
    assert group.instructions == 64 and group.total.flops == attention_flops
    assert report.uncounted == ()
    # attention is model FLOPs (the module's small remat share is elementwise work behind barriers)
    assert not any(r.remat for r in report.rows if op_group(r.opcode, r.target) == "attention")
