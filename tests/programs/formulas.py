"""Hand formulas for op counts, as XLA's HloCostAnalysis defines them (see the shared reference).

Plain integer arithmetic, no jax: the catalogues call these to fill `Program.formula`.
"""

from __future__ import annotations

import math
from typing import Sequence


def elements(shape: Sequence[int]) -> int:
    return math.prod(shape)


def ceil_log2(n: int) -> int:
    return 0 if n <= 1 else (n - 1).bit_length()


def floor_log2(n: int) -> int:
    return n.bit_length() - 1


def dot_flops(out_shape: Sequence[int], contracting_sizes: Sequence[int]) -> int:
    """2 * N(out) * prod(contracting dims): one multiply and one add per (output, k) pair."""
    return 2 * elements(out_shape) * math.prod(contracting_sizes)


def sort_flops(n_operand0: int) -> int:
    """N * ceil(log2 N), N = every element of operand 0 (not per sorted row)."""
    return n_operand0 * ceil_log2(n_operand0)


def reduce_flops(n_in: int, n_out: int, reducer_flops: int = 1) -> int:
    """Each reduced-away element costs one application of the reducer."""
    return (n_in - n_out) * reducer_flops


def reduce_window_flops(window: Sequence[int], n_out: int, reducer_flops: int = 1) -> int:
    """(W - 1) reducer applications per output element, padded taps included."""
    return (math.prod(window) - 1) * n_out * reducer_flops


def fft_flops(fft_lengths: Sequence[int], n_operand: int) -> int:
    return 8 * math.prod(floor_log2(n) for n in fft_lengths) * n_operand


def valid_taps(
    size_in: int, size_kernel: int, size_out: int, stride: int, pad_lo: int, lhs_dilation: int, rhs_dilation: int
) -> int:
    """Number of (kernel tap, output position) pairs of one spatial dim that land on a real input element.

    Input positions live on the lhs-dilated, padded grid; a tap is real only when it falls on an
    original element (not padding, not a dilation hole).
    """
    count = 0
    for k in range(size_kernel):
        for o in range(size_out):
            u = o * stride - pad_lo + k * rhs_dilation
            if u >= 0 and u % lhs_dilation == 0 and u // lhs_dilation < size_in:
                count += 1
    return count


def conv_flops(
    *,
    batch: int,
    in_features: int,
    out_features: int,
    spatial_in: Sequence[int],
    spatial_kernel: Sequence[int],
    spatial_out: Sequence[int],
    strides: Sequence[int],
    pads_lo: Sequence[int],
    lhs_dilation: Sequence[int],
    rhs_dilation: Sequence[int],
    feature_group_count: int = 1,
    batch_group_count: int = 1,
) -> int:
    """2 * (Cin / G) * Cout * (B / BG) * prod over spatial dims of the valid taps."""
    taps = 1
    for i, k, o, s, p, ld, rd in zip(
        spatial_in, spatial_kernel, spatial_out, strides, pads_lo, lhs_dilation, rhs_dilation, strict=True
    ):
        taps *= valid_taps(i, k, o, s, p, ld, rd)
    return 2 * (in_features // feature_group_count) * out_features * (batch // batch_group_count) * taps


# XLA:CPU's tree-reduction rewrite: a reduce whose reduced dimensions include the minor-most ones
# with a contiguous extent above this is split into a reduce-window plus a smaller reduce. The
# total is unchanged (every element is still added once), but the flops move between opcodes.
TREE_REDUCTION_MAX_MINOR_EXTENT = 32


def reduction_is_split_on_cpu(shape: Sequence[int], reduced_dims: Sequence[int]) -> bool:
    """Whether the minor-most contiguous run of reduced dims (row-major layout) exceeds the limit."""
    extent, dim = 1, len(shape) - 1
    while dim >= 0 and dim in reduced_dims:
        extent *= shape[dim]
        dim -= 1
    return extent > TREE_REDUCTION_MAX_MINOR_EXTENT


def reduction_formula(
    shape: Sequence[int], reduced_dims: Sequence[int], *, reducer_flops: int = 1, extra_flops: int = 0
) -> dict[str, int]:
    """Whole-program `flops` of one reduction (plus `extra_flops` of elementwise work around it), and
    `reduce_flops` only when the reduction stays one `reduce` instruction on CPU."""
    n_in = elements(shape)
    n_out = n_in // elements([shape[d] for d in reduced_dims])
    flops = reduce_flops(n_in, n_out, reducer_flops)
    formula = {"flops": flops + extra_flops}
    if not reduction_is_split_on_cpu(shape, reduced_dims):
        formula["reduce_flops"] = flops
    return formula
