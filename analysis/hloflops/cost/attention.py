"""Fused attention custom-calls, costed from their configuration by one convention.

Targets: cuDNN's fused attention as XLA emits it (`__cudnn$fmha*`, every form in XLA's
`cublas_cudnn.h`: Softmax, ScaleBiasSoftmax, their Dropout forms, the Backward of each, and the
F8 forward and backward) and TransformerEngine's FFI calls (`te_fused_attn_forward_ffi`,
`te_fused_attn_backward_ffi`).

THE CONVENTION (README "Fused attention"). Per batch, query head and query row i, let n(i) be the
score entries (i, j) the mask keeps; grouped-query attention counts every query head.

  forward   2*n*Dqk (Q K^T) + 2*n*Dv (P V)
            + softmax as XLA counts jax's unfused one: scale n, row max n-1, max with its
              -inf start 1, subtract n, row sum n-1, divide n  ->  5n - 1   (+ n for a bias)
            transcendentals: n exp (+ n random bits for dropout, as rng-bit-generator counts)
  backward  FlashAttention-2's GEMMs: Q K^T recomputed 2*n*Dqk, dV 2*n*Dv, dP 2*n*Dv,
            dQ 2*n*Dqk, dK 2*n*Dqk
            + P recomputed from the saved log-sum-exp: scale n, subtract n (+ n bias), exp n
            + softmax gradient dS = P o (dP - rowsum(dP o P)): 4n - 1, its scale n
            ->  7n - 1 flops (+ n for a bias); n exp (+ n random bits for dropout)
  a row the mask empties (n = 0) costs nothing.

Masks by their definitions: none (every j < Sk), causal top-left (j <= i), causal bottom-right
(j <= i + Sk - Sq), sliding windows (cuDNN: the last W keys up to the diagonal; TE: left/right
window sizes around the diagonal, -1 unbounded, the diagonal bottom-right for its *_BOTTOM_RIGHT
masks and top-left otherwise). Padding masks keep i < q_len, j < kv_len of each
sequence; those lengths are operands. When they are constants in the HLO they are used; when
they are runtime values the count takes every sequence at its full length (q_max_seqlen,
kv_max_seqlen: an upper bound, the usual MFU convention) and the row's note says so. FP8 forms
count the same work (their scale/descale multiplies and amax reductions are not counted).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from hloflops.cost.costs import Cost
from hloflops.cost.shapes import output_size, size
from hloparse.ir import Computation, Instruction

CONVENTION_LINES = (
    "FlashAttention-2 convention: GEMMs 2*M*N*K over the score entries the mask keeps",
    "(forward QK^T, PV; backward QK^T recomputed, dV, dP, dQ, dK), the softmax and its gradient",
    "as XLA counts the unfused form, one exp per kept entry; GQA counts every query head",
)
CONVENTION = " ".join(CONVENTION_LINES)
ATTENTION = "attention"  # the by_opcode group these ops fall in

CUDNN_FORWARD = frozenset({
    "__cudnn$fmhaSoftmax", "__cudnn$fmhaScaleBiasSoftmax", "__cudnn$fmhaSoftmaxDropout",
    "__cudnn$fmhaScaleBiasSoftmaxDropout", "__cudnn$fmhaSoftmaxF8",
})
CUDNN_BACKWARD = frozenset({
    "__cudnn$fmhaSoftmaxBackward", "__cudnn$fmhaScaleBiasSoftmaxBackward",
    "__cudnn$fmhaSoftmaxDropoutBackward", "__cudnn$fmhaScaleBiasSoftmaxDropoutBackward",
    "__cudnn$fmhaSoftmaxBackwardF8",
})
TE_FORWARD = "te_fused_attn_forward_ffi"
TE_BACKWARD = "te_fused_attn_backward_ffi"
TARGETS = CUDNN_FORWARD | CUDNN_BACKWARD | {TE_FORWARD, TE_BACKWARD}

# TransformerEngine's NVTE_Mask_Type (transformer_engine/common/include/.../fused_attn.h).
TE_MASKS = {0: "none", 1: "padding", 2: "causal", 3: "padding_causal", 4: "causal_bottom_right",
            5: "padding_causal_bottom_right"}
# NVTE_QKV_Layout 10..14, 17, 18, 23, 24 are THD (ragged, per-token) and 19..24 paged KV: the
# sequence lengths are runtime values there, as with padding masks.
TE_RUNTIME_LENGTH_LAYOUTS = frozenset({10, 11, 12, 13, 14, 17, 18, 19, 20, 21, 22, 23, 24})
CUDNN_MASKS = {"NO_MASK": "none", "PADDING": "padding", "CAUSAL": "causal", "PADDING_CAUSAL": "padding_causal"}


@dataclass(frozen=True, slots=True)
class Attention:
    """What the convention needs about one fused attention call."""

    batch: int
    heads: int  # query heads
    q_len: int  # Sq (per sequence, the maximum)
    kv_len: int  # Sk
    qk_dim: int
    v_dim: int
    causal: bool  # keys j <= the diagonal (padding is in `sequences`)
    bottom_right: bool  # the diagonal is j = i + Sk - Sq (else j = i, top-left)
    left: int  # window: keys j >= diagonal - left are kept (-1: unbounded)
    right: int  # keys j <= diagonal + right (-1: unbounded)
    bias: bool = False
    dropout: bool = False
    # (q_len, kv_len) of every sequence when padding or packing makes them differ from the
    # maximum and the HLO holds them as constants; None: every batch row at (q_len, kv_len).
    sequences: tuple[tuple[int, int], ...] | None = None
    runtime_lengths: bool = False  # padding lengths are runtime values: counted at full length


def is_attention(target: str | None) -> bool:
    return target in TARGETS


# ---- the convention ---------------------------------------------------------------------------
def kept_entries(q_len: int, kv_len: int, causal: bool, bottom_right: bool, left: int = -1,
                 right: int = -1) -> tuple[int, int]:
    """(score entries kept, rows with at least one) of one sequence and head.

    Row i keeps keys lo(i)..hi(i): lo is 0 or diagonal - left, hi the least of kv_len - 1, the
    diagonal (causal) and diagonal + right. Each bound switches between its terms at most once,
    so between those switches a row's count changes by the same step (-1, 0 or 1) from row to
    row, and each such run of rows is summed as an arithmetic series instead of row by row."""
    if q_len <= 0:
        return 0, 0
    offset = kv_len - q_len if bottom_right else 0

    def kept(i: int) -> int:
        diagonal = i + offset
        lo = 0 if left < 0 else max(0, diagonal - left)
        hi = kv_len - 1
        if causal:
            hi = min(hi, diagonal)
        if right >= 0:
            hi = min(hi, diagonal + right)
        return hi - lo + 1

    switches = {kv_len - 1 - offset}
    if right >= 0:
        switches.add(kv_len - 1 - right - offset)
    if left >= 0:
        switches.add(left - offset)
    cuts = sorted({0, q_len} | {c for s in switches for c in (s, s + 1) if 0 < c < q_len})
    entries = rows = 0
    for start, stop in zip(cuts, cuts[1:]):
        first = kept(start)
        step = kept(start + 1) - first if stop - start > 1 else 0
        if step > 0:  # rows from the first with a positive count: first + (i - start) > 0
            start, first = max(start, start + 1 - first), max(first, 1)
        elif step < 0:  # rows up to the last with a positive count: first - (i - start) > 0
            stop = min(stop, start + first)
        elif first <= 0:
            continue
        count = stop - start
        if count > 0:
            last = first + step * (count - 1)
            entries += (first + last) * count // 2
            rows += count
    return entries, rows


def score_entries(a: Attention) -> tuple[int, int]:
    """(kept score entries, non-empty rows) summed over every batch row and query head."""
    if a.sequences is None:
        counts = {(a.q_len, a.kv_len): a.batch}
    else:
        counts = {}
        for sequence in a.sequences:
            counts[sequence] = counts.get(sequence, 0) + 1
    entries = rows = 0
    for (q_len, kv_len), times in counts.items():
        e, r = kept_entries(q_len, kv_len, a.causal, a.bottom_right, a.left, a.right)
        entries += e * times
        rows += r * times
    return entries * a.heads, rows * a.heads


def forward_flops(a: Attention) -> tuple[int, int]:
    n, rows = score_entries(a)
    flops = 2 * n * a.qk_dim + 2 * n * a.v_dim + 5 * n - rows + (n if a.bias else 0)
    return flops, n + (n if a.dropout else 0)


def backward_flops(a: Attention) -> tuple[int, int]:
    n, rows = score_entries(a)
    flops = 6 * n * a.qk_dim + 4 * n * a.v_dim + 7 * n - rows + (n if a.bias else 0)
    return flops, n + (n if a.dropout else 0)


# ---- reading the calls ------------------------------------------------------------------------
def attention_cost(computation: Computation, inst: Instruction) -> Cost | str:
    """The convention's cost of one fused attention call, or why it cannot be read."""
    target = inst.custom_call_target or ""
    a = describe(computation, inst)
    if isinstance(a, str):
        return f"custom-call target {target}: {a}"
    backward = target in CUDNN_BACKWARD or target == TE_BACKWARD
    flops, transcendentals = backward_flops(a) if backward else forward_flops(a)
    moved = output_size(inst.shape) + sum(size(s) for s in computation.operand_shapes(inst))
    return Cost(flops, transcendentals, moved)


def describe(computation: Computation, inst: Instruction) -> Attention | str:
    target = inst.custom_call_target or ""
    try:
        if target in (TE_FORWARD, TE_BACKWARD):
            return _te(inst)
        if target in CUDNN_FORWARD or target in CUDNN_BACKWARD:
            return _cudnn(computation, inst, target)
    except (KeyError, IndexError, ValueError, TypeError) as err:
        return f"cannot read its configuration ({type(err).__name__}: {err})"
    return "not a fused attention target"


def note(computation: Computation, inst: Instruction) -> str | None:
    """What the row says about a counted attention call: the convention and the mask."""
    a = describe(computation, inst)
    if isinstance(a, str):
        return None
    mask = ("bottom-right causal" if a.bottom_right else "causal") if a.causal else "no causal"
    window = "" if a.left < 0 and a.right < 0 else f", window ({a.left}, {a.right})"
    text = f"attention ({mask} mask{window}; {CONVENTION.split(':')[0]})"
    if a.runtime_lengths:
        text += "; padding lengths are runtime values: counted at full length (upper bound)"
    return text


def _cudnn(computation: Computation, inst: Instruction, target: str) -> Attention | str:
    config = inst.backend_config
    config = config.get("cudnn_fmha_backend_config") if isinstance(config, dict) else None
    if not isinstance(config, dict):
        return "no cudnn_fmha_backend_config in backend_config"
    batch, heads, q_len, kv_len = (int(d) for d in config["intermediate_tensor_shape"]["dimensions"])
    operands = computation.operand_shapes(inst)
    mask_name = config.get("mask_type") or ("CAUSAL" if config.get("is_causal_mask") else "NO_MASK")
    if mask_name not in CUDNN_MASKS:
        return f"mask_type {mask_name} has no stated convention"
    mask = CUDNN_MASKS[mask_name]
    window = int(config.get("sliding_window_length") or 0)
    backward = target in CUDNN_BACKWARD
    bias = "ScaleBias" in target
    segments = int(config.get("max_seg_per_batch") or 1)
    sequences, runtime = None, False
    if mask.startswith("padding") or segments > 1 or config.get("is_paged_attention"):
        # operands: q, k, v, [stats, dO,] [bias,] [O,] q_seqlen, kv_seqlen, [offsets...]
        first = 3 + (3 if backward else 0) + (1 if bias else 0)
        q_lens = constant_ints(computation, inst.operands[first])
        kv_lens = constant_ints(computation, inst.operands[first + 1])
        if q_lens is not None and kv_lens is not None and len(q_lens) == len(kv_lens) and not config.get(
                "is_paged_attention"):
            sequences = tuple(zip(q_lens, kv_lens))
        else:
            runtime = True
    return Attention(
        batch=batch, heads=heads, q_len=q_len, kv_len=kv_len,
        qk_dim=operands[0].dims[-1], v_dim=operands[2].dims[-1],
        causal="causal" in mask, bottom_right=False,
        # cuDNN's sliding window: the W keys up to and including the diagonal
        left=window - 1 if window > 0 else -1, right=0 if window > 0 else -1,
        bias=bias, dropout="Dropout" in target or float(config.get("dropout_rate") or 0) > 0,
        sequences=sequences, runtime_lengths=runtime,
    )


def _te(inst: Instruction) -> Attention | str:
    attrs = ffi_attributes(inst.attributes.get("backend_config", ""))
    mask_code = int(attrs["mask_type"])
    if mask_code not in TE_MASKS:
        return f"TransformerEngine mask_type {mask_code} has no stated convention"
    if int(attrs.get("bias_type", 0)) == 3:
        return "ALiBi bias has no stated convention"
    mask = TE_MASKS[mask_code]
    layout = int(attrs.get("qkv_layout", 0))
    runtime = mask.startswith("padding") or layout in TE_RUNTIME_LENGTH_LAYOUTS or int(
        attrs.get("max_segments_per_seq", 1)) > 1
    return Attention(
        batch=int(attrs["input_batch"]), heads=int(attrs["attn_heads"]),
        q_len=int(attrs["q_max_seqlen"]), kv_len=int(attrs["kv_max_seqlen"]),
        qk_dim=int(attrs["qk_head_dim"]), v_dim=int(attrs["v_head_dim"]),
        causal="causal" in mask,
        # TE's make_swa_mask (jax/attention.py): the diagonal (of the causal mask and of the
        # window) is the bottom-right one for the *_BOTTOM_RIGHT masks, the top-left one otherwise.
        bottom_right=mask_code in (4, 5),
        left=int(attrs.get("window_size_left", -1)), right=int(attrs.get("window_size_right", -1)),
        bias=int(attrs.get("bias_type", 0)) != 0,
        dropout=float(attrs.get("dropout_probability", 0.0)) > 0,
        runtime_lengths=runtime,
    )


_FFI_ATTR = re.compile(r'(\w+)\s*=\s*("(?:[^"\\]|\\.)*"|[^,{}:]+?)\s*(?::\s*[\w<>]+\s*)?(?=,|\}|$)')


def ffi_attributes(raw: str) -> dict[str, Any]:
    """An FFI call's attribute dictionary, `{name = 1 : i64, flag = true, x = 0.5 : f64}`."""
    text = raw.strip()
    if text.startswith('"') and text.endswith('"'):
        text = text[1:-1]
    values: dict[str, Any] = {}
    for key, value in _FFI_ATTR.findall(text):
        value = value.strip()
        if value in ("true", "false"):
            values[key] = value == "true"
        elif value.startswith('"'):
            values[key] = value[1:-1]
        else:
            try:
                values[key] = int(value)
            except ValueError:
                values[key] = float(value)
    return values


_INT = re.compile(r"-?\d+")


def constant_ints(computation: Computation, name: str) -> list[int] | None:
    """The integer values of an operand when the HLO holds them as a constant (or a broadcast
    scalar constant); None when they are computed at run time."""
    inst = computation.by_name.get(name)
    if inst is None:
        return None
    count = 1
    for d in inst.shape.dims:
        count *= d
    if inst.opcode == "broadcast":
        source = computation.by_name.get(inst.operands[0])
        if source is None or source.opcode != "constant" or source.shape.dims:
            return None
        values = [int(v) for v in _INT.findall(source.attributes.get("literal", ""))]
        return values * count if len(values) == 1 else None
    if inst.opcode == "constant":
        values = [int(v) for v in _INT.findall(inst.attributes.get("literal", ""))]
        if len(values) == 1 and count > 1:
            return values * count
        return values if len(values) == count else None
    return None
