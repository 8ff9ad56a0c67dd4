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

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from hloflops.report.chips import Chip
from hloflops.report.roofline_basis import OPTIMIZED, UNOPTIMIZED, mandatory_work, optimization_stage
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


def unit_times(report: Report, chip: Chip, module: Module,
               priced: dict[str, str] | None = None) -> list[UnitTime]:
    """One entry per top-level instruction (fusions with what they fuse). `priced` collects the
    rate each dtype was priced at (`rate_label`)."""
    parts: dict[str, list[float]] = {}
    scopes: dict[str, str] = {}
    for row in report.rows:
        key = row.fusion or row.name
        acc = parts.setdefault(key, [0.0, 0.0, 0.0])
        if row.fusion is None or key not in scopes:
            scopes[key] = row.scope
        if row.total.flops:
            dtype = compute_dtype(module, row.computation, row.name, row.opcode)
            key = peak_key(dtype, row.opcode in _MATRIX_OPS, chip)
            rate = chip.peak_flops_per_s[key]
            acc[0] += row.total.flops / rate
            if priced is not None:
                priced[_priced_label(dtype, row.opcode in _MATRIX_OPS)] = rate_label(chip, key)
        acc[1] += row.total.bytes_accessed / chip.hbm_bytes_per_s
        acc[2] += row.communication_total / chip.interconnect_bytes_per_s
    return [UnitTime(k, scopes[k], *v) for k, v in parts.items()]


def _priced_label(dtype: str, matrix: bool) -> str:
    return f"{dtype} {'dot/convolution' if matrix else 'other ops'}"


def rate_label(chip: Chip, key: str) -> str:
    """`tf32 494.5 TFLOP/s`: a rate by its key and value."""
    return f"{key} {chip.peak_flops_per_s[key] / 1e12:,.4g} TFLOP/s"


@dataclass(frozen=True)
class Roofline:
    chip: Chip
    lower_bound_s: float
    by_bound: Mapping[str, float]  # seconds of the instructions each bound limits
    mfu_upper_bound: float | None
    top: tuple[tuple[str, float, str], ...]  # (scope, seconds, its dominant bound)
    exact_inputs: bool  # False when the counts under it are lower bounds themselves
    basis: str = OPTIMIZED  # OPTIMIZED or UNOPTIMIZED (hloflops.report.roofline_basis)
    basis_rule: str = ""  # why the module was taken for one or the other
    priced_at: Mapping[str, str] = field(default_factory=dict)  # "<dtype> dot/convolution" -> rate

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
            "basis": self.basis,
            "basis_rule": self.basis_rule,
            "priced_at": dict(sorted(self.priced_at.items())),
        }


def roofline(report: Report, chip: Chip, module: Module, *, depth: int | None = 3, top: int = 10) -> Roofline:
    before, rule = optimization_stage(module)
    if before:
        return _unoptimized(report, chip, module, rule)
    priced: dict[str, str] = {}
    units = unit_times(report, chip, module, priced)
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
    return Roofline(chip, lower, by_bound, mfu, top_rows, exact, OPTIMIZED, rule, priced)


def _unoptimized(report: Report, chip: Chip, module: Module, rule: str) -> Roofline:
    """max(mandatory compute, mandatory memory) of a module before optimization
    (hloflops.report.roofline_basis)."""
    work = mandatory_work(module)
    priced: dict[str, str] = {}
    compute = 0.0
    for dot in work.dots:
        key = peak_key(dot.dtype, True, chip)
        compute += dot.flops / chip.peak_flops_per_s[key]
        priced[_priced_label(dot.dtype, True)] = rate_label(chip, key)
    memory = work.bytes / chip.hbm_bytes_per_s
    lower = max(compute, memory)
    by_bound = {"compute": lower if compute > memory else 0.0, "memory": lower if compute <= memory else 0.0,
                "network": 0.0}
    mfu = report.model_flops / (lower * chip.mfu_peak) if lower > 0 else None
    exact = report.is_exact and not any(r.communication_uncounted for r in report.rows)
    return Roofline(chip, lower, by_bound, mfu, (), exact, UNOPTIMIZED, rule, priced)


def _priced_text(priced: Mapping[str, str]) -> str:
    """`f32 dot/convolution at tf32 494.5 TFLOP/s; pred, f32, s32 other ops at f32 67 TFLOP/s`."""
    groups: dict[tuple[str, str], list[str]] = {}
    for label, rate in priced.items():
        dtype, kind = label.split(" ", 1)
        groups.setdefault((kind, rate), []).append(dtype)
    return "; ".join(f"{', '.join(sorted(dtypes))} {kind} at {rate}" for (kind, rate), dtypes in sorted(groups.items()))


def summary_lines(result: Roofline) -> list[str]:
    total = result.lower_bound_s
    lines = [f"roofline on {result.chip.name}: step time >= {total * 1e6:,.3f} us"
             + ("" if result.exact_inputs else " (counts are lower bounds)")]
    lines.append(f"  basis: {result.basis} ({result.basis_rule})" if result.basis_rule else f"  basis: {result.basis}")
    if result.basis == UNOPTIMIZED:
        lines.append("  (before optimization: only each ENTRY parameter read once, each output written once, and the "
                     "live ENTRY dots no pass removes; see hloflops.report.roofline_basis)")
    if result.priced_at:
        lines.append("  priced at: " + _priced_text(result.priced_at))
    lines.append("  " + "   ".join(f"{b} {s * 1e6:,.3f} us ({(s / total if total else 0):.1%})"
                                    for b, s in result.by_bound.items()))
    if result.mfu_upper_bound is not None:
        lines.append(f"  mfu upper bound {result.mfu_upper_bound:.1%} (model flops at dense bf16 peak)")
    for scope, seconds, bound in result.top[:5]:
        lines.append(f"  {seconds * 1e6:>14,.3f} us  {bound:<8} {scope or '(no scope)'}")
    return lines
