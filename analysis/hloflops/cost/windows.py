"""Window arithmetic of XLA's cost analysis: the valid (kernel tap, output position) pairs of a
convolution, and the number of reducer applications of a reduce-window."""

from __future__ import annotations

from hloflops.cost.shapes import elements
from hloparse.ir import Instruction, Shape


def _first_output(shape: Shape) -> Shape:
    return shape if not shape.is_tuple else shape.tuple_shapes[0]


def convolution_flops(inst: Instruction, lhs: Shape, rhs: Shape, result: Shape) -> int:
    """XLA's GetConvolutionFlops: 2 x (Cin/feature groups) x Cout x (B/batch groups) x the
    product over spatial dims of the (kernel tap, output position) pairs that land on a real
    input element -- padding and base-dilation holes are not counted."""
    labels = inst.conv_dim_labels
    window = inst.window or ()
    if labels is None:
        raise ValueError("convolution without dim_labels")
    cin = lhs.dims[labels.input_feature]
    cout = result.dims[labels.output_feature]
    batch = lhs.dims[labels.input_batch]
    valid = 1
    if window:
        for s, w in enumerate(window):
            valid *= _valid_taps(
                lhs.dims[labels.input_spatial[s]], rhs.dims[labels.kernel_spatial[s]],
                result.dims[labels.output_spatial[s]], w.stride, w.pad_low, w.pad_high, w.lhs_dilation,
                w.rhs_dilation,
            )
    fma = (cin // inst.feature_group_count) * cout * (batch // inst.batch_group_count) * valid
    return 2 * fma


def _valid_taps(i: int, k: int, o: int, stride: int, lo: int, hi: int, base: int, dil: int) -> int:
    if i == o and k == o and i == base and dil == 1 and max(1, i - 1) == stride and lo == 0 and hi == 0:
        return i
    if i == 1 and k == o and dil == 1 and base == 1 and stride == 1 and hi == o - 1 and lo == o - 1:
        return o
    count = 0
    for tap in range(k):
        if stride == 1 and base == 1:
            start = lo - tap * dil
            count += max(min(i + start, o) - max(start, 0), 0)
            continue
        for out in range(o):
            u = out * stride - lo + tap * dil
            q = int(u / base) if base > 1 else u  # C++ division truncates toward zero
            if u == q * base and 0 <= q < i:
                count += 1
    return count


def reduce_window_count(inst: Instruction, result: Shape) -> int:
    """(window elements - 1) x output elements, padded taps included; or XLA's count for a
    reduce-window that is a reduce followed by a broadcast along one dimension."""
    window = inst.window or ()
    window_elements = 1
    for w in window:
        window_elements *= w.size
    out_elements = elements(_first_output(result))
    count = (window_elements - 1) * out_elements
    reducing = [w for w in window if w.size != 1]
    padded = [w for w in window if w.pad_low != 0 or w.pad_high != 0]
    if len(reducing) == 1 and len(padded) == 1 and not result.is_tuple:
        for d, w in enumerate(window):
            if w.size != 1 and w.pad_low != 0 and w.pad_high != 0 and w.pad_low == w.pad_high \
                    and w.size == 2 * w.pad_low + 1:
                if w.pad_low == result.dims[d] - 1:
                    span = result.dims[d]
                    count = out_elements // span + (span - 1)
                break
    return count
