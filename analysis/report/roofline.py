"""A static roofline: a lower bound on one step's time on a given chip, from exact counts.

Per instruction (a fusion and the ops fused into it are one instruction), over all its
executions: compute time = its FLOPs / the chip's peak for its dtype, memory time = its bytes
accessed / HBM bandwidth, network time = the bytes it sends per device / the interconnect
bandwidth a chip can send at. The instruction takes at least the largest of the three (its
bound); the step takes at least the sum over instructions. Nothing overlaps across
instructions here and every rate is a peak, so this is a lower bound, not a prediction.

The dtype of an instruction is its lhs operand's for dot and convolution (what the matrix unit
consumes) and its result's otherwise. A dtype the chip does not list falls back to a FASTER rate
(f16 -> bf16, f8 -> bf16, f32 -> bf16 on chips without an f32 figure, ...) so that the bound stays
a bound. `mfu_upper_bound` = model FLOPs / (lower bound x the chip's dense bf16 peak).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from hloflops.report.chips import Chip
from hloflops.scopes import scope_prefix
from hloparse.ir import Module

if TYPE_CHECKING:
    from hloflops.report.report import Report

BOUNDS = ("compute", "memory", "network")
_MATRIX_OPS = frozenset({"dot", "convolution"})


def peak_key(dtype: str, matrix: bool, chip: Chip) -> str:
    """Which of the chip's rates an op of `dtype` runs at (see the module docstring)."""
    peaks = chip.peak_flops_per_s
    if dtype.startswith("f8"):
        wanted = ["fp8", "bf16", "f16"]
    elif dtype == "bf16":
        wanted = ["bf16", "f16"]
    elif dtype == "f16":
        wanted = ["f16", "bf16"]
    elif dtype in ("f64", "c128"):
        wanted = ["f64", "f32", "tf32", "bf16"]
    elif dtype in ("s8", "u8", "s4", "u4") and matrix:
        wanted = ["int8", "bf16"]
    elif matrix:  # f32 matrix products: TF32 tensor cores on NVIDIA, bf16 passes on TPU
        wanted = ["tf32", "f32", "bf16"]
    else:
        wanted = ["f32", "bf16"]
    for key in wanted:
        if key in peaks:
            return key
    return max(peaks, key=lambda k: peaks[k])


def compute_dtype(module: Module, computation: str, name: str, opcode: str) -> str:
    comp = module.by_name[computation]
    inst = comp.by_name[name]
    if opcode in _MATRIX_OPS and inst.operands:
        shape = comp.operand_shapes(inst)[0]
    else:
        shape = inst.shape
    for leaf in shape.leaves():
        if leaf.is_array:
            return leaf.element_type
    return "f32"


@dataclass(frozen=True, slots=True)
class UnitTime:
    name: str
    scope: str
    compute_s: float
    memory_s: float
    network_s: float

    @property
    def seconds(self) -> float:
        return max(self.compute_s, self.memory_s, self.network_s)

    @property
    def bound(self) -> str:
        times = (self.compute_s, self.memory_s, self.network_s)
        return BOUNDS[times.index(max(times))]


def unit_times(report: Report, chip: Chip, module: Module) -> list[UnitTime]:
    """One entry per top-level instruction (fusions with what they fuse)."""
    parts: dict[str, list[float]] = {}
    scopes: dict[str, str] = {}
    for row in report.rows:
        key = row.fusion or row.name
        acc = parts.setdefault(key, [0.0, 0.0, 0.0])
        if row.fusion is None or key not in scopes:
            scopes[key] = row.scope
        if row.total.flops:
            dtype = compute_dtype(module, row.computation, row.name, row.opcode)
            rate = chip.peak_flops_per_s[peak_key(dtype, row.opcode in _MATRIX_OPS, chip)]
            acc[0] += row.total.flops / rate
        acc[1] += row.total.bytes_accessed / chip.hbm_bytes_per_s
        acc[2] += row.communication_total / chip.interconnect_bytes_per_s
    return [UnitTime(k, scopes[k], *v) for k, v in parts.items()]


@dataclass(frozen=True)
class Roofline:
    chip: Chip
    lower_bound_s: float
    by_bound: Mapping[str, float]  # seconds of the instructions each bound limits
    mfu_upper_bound: float | None
    top: tuple[tuple[str, float, str], ...]  # (scope, seconds, its dominant bound)
    exact_inputs: bool  # False when the counts under it are lower bounds themselves

    def as_dict(self) -> dict[str, Any]:
        total = self.lower_bound_s
        return {
            "chip": self.chip.as_dict(),
            "lower_bound_s": total,
            "by_bound": dict(self.by_bound),
            "share_by_bound": {k: (v / total if total else None) for k, v in self.by_bound.items()},
            "mfu_upper_bound": self.mfu_upper_bound,
            "top": [{"scope": s, "seconds": t, "share": (t / total if total else None), "bound": b}
                    for s, t, b in self.top],
            "exact_inputs": self.exact_inputs,
        }


def roofline(report: Report, chip: Chip, module: Module, *, depth: int | None = 3, top: int = 10) -> Roofline:
    units = unit_times(report, chip, module)
    by_bound = {b: 0.0 for b in BOUNDS}
    by_scope: dict[str, list[float]] = {}
    for unit in units:
        seconds = unit.seconds
        if not seconds:
            continue
        by_bound[unit.bound] += seconds
        acc = by_scope.setdefault(scope_prefix(unit.scope, depth), [0.0, 0.0, 0.0])
        acc[BOUNDS.index(unit.bound)] += seconds
    lower = sum(by_bound.values())
    ranked = sorted(by_scope.items(), key=lambda kv: (-sum(kv[1]), kv[0]))[:top]
    top_rows = tuple((k, sum(v), BOUNDS[v.index(max(v))]) for k, v in ranked)
    mfu = report.model_flops / (lower * chip.mfu_peak) if lower > 0 else None
    exact = report.is_exact and not any(r.communication_uncounted for r in report.rows)
    return Roofline(chip, lower, by_bound, mfu, top_rows, exact)


def summary_lines(result: Roofline) -> list[str]:
    total = result.lower_bound_s
    lines = [f"roofline on {result.chip.name}: step time >= {total * 1e6:,.3f} us"
             + ("" if result.exact_inputs else " (counts are lower bounds)")]
    lines.append("  " + "   ".join(f"{b} {s * 1e6:,.3f} us ({(s / total if total else 0):.1%})"
                                    for b, s in result.by_bound.items()))
    if result.mfu_upper_bound is not None:
        lines.append(f"  mfu upper bound {result.mfu_upper_bound:.1%} (model flops at dense bf16 peak)")
    for scope, seconds, bound in result.top[:5]:
        lines.append(f"  {seconds * 1e6:>14,.3f} us  {bound:<8} {scope or '(no scope)'}")
    return lines
