"""Decoded attribute values of an instruction (the IR holds them; `hloparse.attributes` decodes
them from the attribute text)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DotDimensionNumbers:
    lhs_batch: tuple[int, ...]
    rhs_batch: tuple[int, ...]
    lhs_contracting: tuple[int, ...]
    rhs_contracting: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class WindowDim:
    size: int = 1
    stride: int = 1
    pad_low: int = 0
    pad_high: int = 0
    lhs_dilation: int = 1  # XLA's base dilation
    rhs_dilation: int = 1  # XLA's window dilation
    reversal: bool = False


@dataclass(frozen=True, slots=True)
class ConvDimLabels:
    """`b01f_01io->b01f` decoded to dimension numbers (indices into each shape)."""

    input_batch: int
    input_feature: int
    input_spatial: tuple[int, ...]
    kernel_input_feature: int
    kernel_output_feature: int
    kernel_spatial: tuple[int, ...]
    output_batch: int
    output_feature: int
    output_spatial: tuple[int, ...]
