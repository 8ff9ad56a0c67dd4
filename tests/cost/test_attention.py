"""Fused attention custom-calls against the unfused computation and the stated convention.

The unfused side is `jax.nn.dot_product_attention(..., implementation="xla")` lowered on CPU (float16
for CUDA, which jax's CPU lowering refuses for that dtype; lowering needs no GPU) (HLO
before XLA's optimizations: the dots and softmax jax writes), counted by our ordinary rules. The
fused side is a custom-call module written here with the same shapes, its backend config taken
from the corpus (XLA's gpu_fused_mha_test for cuDNN, the Llama 3.1 8B dump for TransformerEngine)
with only shapes, mask and window changed.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

from hloflops import analyze
from hloflops.cost import attention
from hloparse import parse
from tests.support.corpus import require_corpus

# The fused modules below are built from a real one's backend config, read from the development
# corpus: the tests that build them take the corpus_dir fixture (skipped without the corpus).
CUDNN_TEMPLATE = Path("xla_cc_gpu") / "backends__gpu__tests__gpu_fused_mha_test__L1145.hlo"
TE_TEMPLATE = Path("xla_benchmark_models") / "tools__benchmarks__hlo__hlo_llama31_8b_bf16_2x8.hlo"
NEEDS_CORPUS = pytest.mark.usefixtures("corpus_dir")
HLO_TYPE = {"bfloat16": "bf16", "float16": "f16", "float32": "f32"}

B, T, S, N, H = 2, 16, 16, 4, 8
DTYPES = ("bfloat16", "float16", "float32")
GQA = (1, 2, 4)  # query heads per KV head


# ---- the convention, written out -------------------------------------------------------------
def forward_formula(entries: int, rows: int, qk: int = H, v: int = H) -> int:
    """2*n*Dqk + 2*n*Dv GEMMs + (5n - 1) softmax per non-empty row (n kept entries in it)."""
    return 2 * entries * qk + 2 * entries * v + 5 * entries - rows


def backward_formula(entries: int, rows: int, qk: int = H, v: int = H) -> int:
    """QK^T recomputed, dV, dP, dQ, dK GEMMs + (7n - 1) elementwise per non-empty row."""
    return 6 * entries * qk + 4 * entries * v + 7 * entries - rows


# ---- the two sides ---------------------------------------------------------------------------
MASKS = {
    # name: (jax keyword arguments, cuDNN mask_type, sliding_window_length, kept-entry count of
    # one (batch, head) with Sq = Sk = S, and its non-empty rows)
    "none": ({}, "NO_MASK", 0, S * S, T),
    "causal": ({"is_causal": True}, "CAUSAL", 0, S * (S + 1) // 2, T),
    # cuDNN's sliding window W = jax's left window + 1, with the causal mask
    "window": ({"is_causal": True, "local_window_size": (3, 0)}, "CAUSAL", 4,
               sum(min(i + 1, 4) for i in range(T)), T),
}
PADDING_Q, PADDING_KV = (11, 16), (9, 5)  # per batch row


def unfused(dtype: str, group: int, jax_kwargs: dict, padding: bool = False, grad: bool = False):
    import jax
    import jax.numpy as jnp

    heads_kv = N // group
    q = jnp.zeros((B, T, N, H), dtype)
    k = jnp.zeros((B, S, heads_kv, H), dtype)
    extra = {}
    if padding:
        extra = {"query_seq_lengths": jnp.array(PADDING_Q, jnp.int32),
                 "key_value_seq_lengths": jnp.array(PADDING_KV, jnp.int32)}

    def attend(q, k, v):
        return jax.nn.dot_product_attention(q, k, v, implementation="xla", **jax_kwargs, **extra)

    def attend_and_grad(q, k, v, do):
        out, vjp = jax.vjp(attend, q, k, v)
        return out, vjp(do)  # the output too, or jax drops the forward's P V dot as dead

    # float16 asks dot_general for F16_F16_F32, which jax's CPU lowering refuses: that dtype is
    # lowered for CUDA instead (lowering needs no GPU); the others on CPU.
    platforms = ("cuda",) if dtype == "float16" else ("cpu",)
    fn, args = (attend_and_grad, (q, k, k, q)) if grad else (attend, (q, k, k))
    return jax.jit(fn).trace(*args).lower(lowering_platforms=platforms).as_text(dialect="hlo")


@lru_cache(maxsize=None)
def cudnn_config() -> dict:
    module = parse((require_corpus() / CUDNN_TEMPLATE).read_text())
    for _, inst in module.instructions():
        if inst.custom_call_target == "__cudnn$fmhaSoftmax":
            return inst.backend_config
    raise AssertionError("no __cudnn$fmhaSoftmax in the template")


def fused_cudnn(dtype: str, group: int, mask_type: str, window: int, padding: bool = False,
                backward: bool = False) -> str:
    """A cuDNN fused attention module (BTNH layout, as jax lowers it) with these shapes."""
    t = HLO_TYPE[dtype]
    config = json.loads(json.dumps(cudnn_config()))
    fmha = config["cudnn_fmha_backend_config"]
    fmha["intermediate_tensor_shape"]["dimensions"] = [str(d) for d in (B, N, T, S)]
    fmha["mask_type"] = mask_type
    fmha["sliding_window_length"] = window
    q, kv, out = f"{t}[{B},{T},{N},{H}]", f"{t}[{B},{S},{N // group},{H}]", f"{t}[{B},{N},{T},{H}]{{3,1,2,0}}"
    lines = [f"  q = {q} parameter(0)", f"  k = {kv} parameter(1)", f"  v = {kv} parameter(2)"]
    operands = ["q", "k", "v"]
    if backward:
        lines += [f"  stats = f32[{B},{N},{T}] parameter(3)", f"  d_o = {q} parameter(4)", f"  o = {q} parameter(5)"]
        operands += ["stats", "d_o", "o"]
    if padding:
        lines += [f"  q_len = s32[{B}] constant({{{', '.join(map(str, PADDING_Q))}}})",
                  f"  kv_len = s32[{B}] constant({{{', '.join(map(str, PADDING_KV))}}})"]
        operands += ["q_len", "kv_len"]
    if backward:
        target = "__cudnn$fmhaSoftmaxBackward"
        result = f"({out}, {out.replace(str(T), str(S), 1)}, {out.replace(str(T), str(S), 1)}, u8[0])"
        for key in ("bmm1_dot_dimension_numbers", "bmm2_dot_dimension_numbers"):
            fmha.pop(key, None)
    else:
        target = "__cudnn$fmhaSoftmax"
        result = f"({out}, f32[{B},{N},{T}], u8[0])"
    lines.append(f"  ROOT fmha = {result} custom-call({', '.join(operands)}), custom_call_target=\"{target}\", "
                 f"backend_config={json.dumps(config)}")
    return "HloModule fused\n\nENTRY main {\n" + "\n".join(lines) + "\n}\n"


@lru_cache(maxsize=None)
def te_attributes() -> str:
    match = re.search(r'custom_call_target="te_fused_attn_forward_ffi".*?backend_config=(\{[^}]*\})',
                      (require_corpus() / TE_TEMPLATE).read_text())
    assert match, "no te_fused_attn_forward_ffi in the Llama dump"
    return match.group(1)


def fused_te(dtype: str, group: int, mask_type: int, window: tuple[int, int] = (-1, -1), backward: bool = False,
             q_len: int = T, kv_len: int = S) -> str:
    """A TransformerEngine fused attention module (BSHD_BSHD_BSHD) with these shapes."""
    t = HLO_TYPE[dtype]
    values = {"input_batch": B, "attn_heads": N, "num_gqa_groups": N // group, "q_max_seqlen": q_len,
              "kv_max_seqlen": kv_len, "qk_head_dim": H, "v_head_dim": H, "mask_type": mask_type,
              "window_size_left": window[0], "window_size_right": window[1], "qkv_layout": 9}
    attrs = te_attributes()
    for key, value in values.items():
        attrs, count = re.subn(rf"\b{key} = -?\d+ : i64", f"{key} = {value} : i64", attrs)
        assert count == 1, key
    q, kv = f"{t}[{B},{q_len},{N},{H}]", f"{t}[{B},{kv_len},{N // group},{H}]"
    lines = [f"  q = {q} parameter(0)", f"  k = {kv} parameter(1)", f"  v = {kv} parameter(2)",
             f"  bias = {t}[0] constant({{}})", "  seed = u32[2] parameter(3)",
             f"  cu_q = s32[{B + 1}] parameter(4)", f"  cu_kv = s32[{B + 1}] parameter(5)"]
    operands = ["q", "k", "v", "bias", "seed", "cu_q", "cu_kv"]
    if backward:
        lines += [f"  stats = f32[{B},{N},{q_len},1] parameter(6)", f"  d_o = {q} parameter(7)",
                  f"  o = {q} parameter(8)"]
        operands = ["q", "k", "v", "bias", "stats", "seed", "d_o", "o", "cu_q", "cu_kv"]
        target, result = "te_fused_attn_backward_ffi", f"({q}, {kv}, {kv}, {t}[0], u8[16])"
    else:
        target, result = "te_fused_attn_forward_ffi", f"({q}, f32[{B},{N},{q_len},1], u32[2], u8[16])"
    lines.append(f"  ROOT te = {result} custom-call({', '.join(operands)}), custom_call_target=\"{target}\", "
                 f"api_version=API_VERSION_TYPED_FFI, backend_config={attrs}")
    return "HloModule fused_te\n\nENTRY main {\n" + "\n".join(lines) + "\n}\n"


def dot_and_softmax(report) -> tuple[int, int]:
    """The unfused module's dot + softmax work: every op but the dtype converts (cuDNN casts in
    registers) and, in masked modules, the mask's construction (compared against the formula)."""
    flops = sum(r.total.flops for r in report.rows if r.opcode != "convert")
    return flops, report.transcendentals


def dots(report) -> int:
    return sum(r.total.flops for r in report.rows if r.opcode == "dot")


# ---- forward: unfused vs fused ---------------------------------------------------------------
@NEEDS_CORPUS
@pytest.mark.parametrize("group", GQA)
@pytest.mark.parametrize("dtype", DTYPES)
def test_no_mask_fused_equals_unfused_dot_and_softmax(dtype, group):
    reference = analyze(unfused(dtype, group, {}))
    assert {r.opcode for r in reference.rows if r.total.flops} <= {
        "dot", "multiply", "reduce", "maximum", "subtract", "divide", "convert"}
    flops, transcendentals = dot_and_softmax(reference)
    for fused in (fused_cudnn(dtype, group, "NO_MASK", 0), fused_te(dtype, group, 0)):
        report = analyze(fused)
        assert report.uncounted == ()
        assert (report.flops, report.transcendentals) == (flops, transcendentals)
        assert flops == forward_formula(B * N * S * S, B * N * T)


@NEEDS_CORPUS
@pytest.mark.parametrize("group", GQA)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask", ["causal", "window"])
def test_masked_fused_equals_the_formula(mask, dtype, group):
    jax_kwargs, mask_type, window, per_head, rows = MASKS[mask]
    entries, rows = B * N * per_head, B * N * rows
    # the unfused module computes every score and masks after: its GEMMs are the unmasked ones
    reference = analyze(unfused(dtype, group, jax_kwargs))
    assert dots(reference) == 2 * B * N * T * S * (H + H)
    cudnn = analyze(fused_cudnn(dtype, group, mask_type, window))
    te = analyze(fused_te(dtype, group, 2, (3, 0) if mask == "window" else (-1, -1)))
    for report in (cudnn, te):
        assert report.uncounted == ()
        assert report.flops == forward_formula(entries, rows)
        assert report.transcendentals == entries


@NEEDS_CORPUS
@pytest.mark.parametrize("group", GQA)
@pytest.mark.parametrize("dtype", DTYPES)
def test_padding_with_constant_lengths_counts_each_sequence(dtype, group):
    unfused(dtype, group, {}, padding=True)  # jax accepts these lengths for these shapes
    entries = N * sum(q * kv for q, kv in zip(PADDING_Q, PADDING_KV))
    rows = N * sum(PADDING_Q)
    report = analyze(fused_cudnn(dtype, group, "PADDING", 0, padding=True))
    assert report.uncounted == ()
    assert report.flops == forward_formula(entries, rows)
    assert not any("upper bound" in (r.note or "") for r in report.rows)


@NEEDS_CORPUS
def test_runtime_padding_lengths_count_full_length_and_say_so():
    report = analyze(fused_te("bfloat16", 2, 3))  # PADDING_CAUSAL, cu_seqlens are parameters
    assert report.flops == forward_formula(B * N * S * (S + 1) // 2, B * N * T)
    (row,) = [r for r in report.rows if r.target == "te_fused_attn_forward_ffi"]
    assert "upper bound" in row.note
    assert "upper bound" in report.summary()


# ---- the masks are jax's masks -----------------------------------------------------------------
@pytest.mark.parametrize("q_len,kv_len", [(16, 16), (7, 16), (16, 7)])
@pytest.mark.parametrize("window", [None, (3, 0), (2, 5), (0, 0)])
@pytest.mark.parametrize("causal", [False, True])
def test_kept_entries_match_jax_masks(causal, window, q_len, kv_len):
    from jax._src.nn.functions import _get_causal_mask, _get_window_mask

    mask = np.ones((q_len, kv_len), bool)
    if causal:
        mask &= np.asarray(_get_causal_mask(q_len, kv_len))[0, 0]
    if window is not None:
        mask &= np.asarray(_get_window_mask(q_len, kv_len, window))[0, 0]
    left, right = window if window is not None else (-1, -1)
    got = attention.kept_entries(q_len, kv_len, causal, False, left, right)
    assert got == (int(mask.sum()), int(mask.any(axis=1).sum()))


@NEEDS_CORPUS
@pytest.mark.parametrize("q_len,kv_len", [(16, 16), (7, 16), (16, 7)])
def test_bottom_right_causal_by_its_definition(q_len, kv_len):
    # key j is kept for query i when j <= i + kv_len - q_len
    expected = sum(max(0, min(kv_len, i + kv_len - q_len + 1)) for i in range(q_len))
    rows = sum(1 for i in range(q_len) if i + kv_len - q_len >= 0)
    assert attention.kept_entries(q_len, kv_len, True, True) == (expected, rows)
    report = analyze(fused_te("bfloat16", 1, 4, q_len=q_len, kv_len=kv_len))
    assert report.flops == forward_formula(B * N * expected, B * N * rows)


def test_causal_square_is_s_times_s_plus_one_over_two():
    assert attention.kept_entries(8192, 8192, True, False) == (8192 * 8193 // 2, 8192)


# ---- backward ----------------------------------------------------------------------------------
@NEEDS_CORPUS
@pytest.mark.parametrize("group", GQA)
@pytest.mark.parametrize("dtype", DTYPES)
def test_backward_gemms_are_the_unfused_backward_dots_plus_the_recompute(dtype, group):
    forward = analyze(unfused(dtype, group, {}))
    both = analyze(unfused(dtype, group, {}, grad=True))
    backward_dots = dots(both) - dots(forward)  # dV, dP, dQ, dK as jax's autodiff writes them
    recompute = 2 * B * N * T * S * H  # FlashAttention-2 recomputes Q K^T
    entries, rows = B * N * T * S, B * N * T
    elementwise = 7 * entries - rows
    for fused in (fused_cudnn(dtype, group, "NO_MASK", 0, backward=True), fused_te(dtype, group, 0, backward=True)):
        report = analyze(fused)
        assert report.uncounted == ()
        assert report.flops == backward_dots + recompute + elementwise == backward_formula(entries, rows)
        assert report.transcendentals == entries


@NEEDS_CORPUS
def test_backward_causal_follows_the_formula():
    entries, rows = B * N * S * (S + 1) // 2, B * N * T
    for fused in (fused_cudnn("bfloat16", 2, "CAUSAL", 0, backward=True), fused_te("bfloat16", 2, 2, backward=True)):
        assert analyze(fused).flops == backward_formula(entries, rows)


# ---- XLA's own pair: gpu_fused_mha_test's reference and fused forms ----------------------------
def test_gpu_fused_mha_test_pair_gemms(corpus_dir: Path):
    """L806 is the reference (plain dots and softmax, forward and backward) of the fused L920:
    B=2, N=6, Sq=Sk=1024, D=64, no mask. The fused pair's GEMMs are the reference's six dots plus
    FlashAttention-2's recompute of Q K^T; the rest follows the formula."""
    folder = corpus_dir / "xla_cc_gpu"
    reference = analyze(str(folder / "backends__gpu__tests__gpu_fused_mha_test__L806.hlo"))
    fused = analyze(str(folder / "backends__gpu__tests__gpu_fused_mha_test__L920.hlo"))
    entries, rows, d = 2 * 6 * 1024 * 1024, 2 * 6 * 1024, 64
    assert fused.uncounted == ()
    assert len([r for r in reference.rows if r.opcode == "dot"]) == 6
    fused_gemms = dots(reference) + 2 * entries * d
    fused_softmax = (5 * entries - rows) + (7 * entries - rows)
    assert fused.flops == fused_gemms + fused_softmax
    assert fused.flops == forward_formula(entries, rows, d, d) + backward_formula(entries, rows, d, d)
    assert fused.transcendentals == 2 * entries


# ---- the report --------------------------------------------------------------------------------
@NEEDS_CORPUS
def test_attention_is_its_own_line_with_the_convention():
    report = analyze(fused_cudnn("bfloat16", 2, "CAUSAL", 0))
    groups = {g.key: g for g in report.by_opcode()}
    assert "custom-call" not in groups and groups["attention"].total.flops == report.flops
    (row,) = [r for r in report.rows if r.opcode == "custom-call"]
    assert row.target == "__cudnn$fmhaSoftmax" and row.note.startswith("attention (causal mask")
    data = report.to_dict(rows=True)
    assert data["by_opcode"]["attention"]["flops"] == report.flops
    assert data["conventions"] == {"attention": attention.CONVENTION}
    assert [r["target"] for r in data["rows"] if r["opcode"] == "custom-call"] == ["__cudnn$fmhaSoftmax"]
    assert report.model_flops == report.flops
    assert "counted by the FlashAttention-2 convention" in report.summary()


@NEEDS_CORPUS
def test_unknown_attention_configuration_is_reported_not_guessed():
    text = fused_te("bfloat16", 1, 2).replace("mask_type = 2 : i64", "mask_type = 6 : i64")
    report = analyze(text)
    (u,) = report.uncounted
    assert u.target == "te_fused_attn_forward_ffi" and "mask_type 6" in u.reason
    assert report.flops == 0 and not report.is_exact


@NEEDS_CORPUS
@pytest.mark.parametrize("mask_type,causal", [(0, False), (2, True)])
@pytest.mark.parametrize("window", [(2, 5), (3, 0)])
@pytest.mark.parametrize("q_len,kv_len", [(16, 16), (7, 16)])
def test_te_windows_are_top_left_like_jax_unless_bottom_right(mask_type, causal, window, q_len, kv_len):
    from jax._src.nn.functions import _get_causal_mask, _get_window_mask

    mask = np.asarray(_get_window_mask(q_len, kv_len, window))[0, 0]
    if causal:
        mask = mask & np.asarray(_get_causal_mask(q_len, kv_len))[0, 0]
    entries, rows = int(mask.sum()), int(mask.any(axis=1).sum())
    report = analyze(fused_te("bfloat16", 2, mask_type, window, q_len=q_len, kv_len=kv_len))
    assert report.flops == forward_formula(B * N * entries, B * N * rows)
    # the bottom-right form of the causal mask shifts the same window by Sk - Sq
    shifted = np.zeros_like(mask)
    offset = kv_len - q_len
    for i in range(q_len):
        for j in range(kv_len):
            shifted[i, j] = i + offset - window[0] <= j <= min(i + offset + window[1], i + offset)
    bottom_right = analyze(fused_te("bfloat16", 2, 4, window, q_len=q_len, kv_len=kv_len))
    assert bottom_right.flops == forward_formula(B * N * int(shifted.sum()), B * N * int(shifted.any(axis=1).sum()))


def _kept_row_by_row(q_len, kv_len, causal, bottom_right, left, right):
    """The mask's definition, one score row at a time (kept_entries sums runs of rows)."""
    offset = kv_len - q_len if bottom_right else 0
    entries = rows = 0
    for i in range(q_len):
        diagonal = i + offset
        lo = 0 if left < 0 else max(0, diagonal - left)
        hi = min([kv_len - 1] + ([diagonal] if causal else []) + ([diagonal + right] if right >= 0 else []))
        if hi >= lo:
            entries += hi - lo + 1
            rows += 1
    return entries, rows


def test_kept_entries_sum_the_rows_of_every_small_mask():
    for q_len in range(0, 11):
        for kv_len in range(0, 11):
            for causal in (False, True):
                for bottom_right in (False, True):
                    for left in range(-1, 12):
                        for right in range(-1, 12):
                            args = (q_len, kv_len, causal, bottom_right, left, right)
                            assert attention.kept_entries(*args) == _kept_row_by_row(*args), args
