"""XLA's own time estimate of the step, multiplied by the loops.

Compilers write their cost model's verdict into the backend_config of the kernels they emit:

- TPU: `window_config.estimated_cycles` on each fusion (and on the convolution fusions that hold
  the matmuls): TPU's cost model's cycles for one run of that kernel;
- GPU, compiled with `--xla_gpu_collect_cost_model_stats`: `reification_cost` entries
  (`exec_time_us`, `end_to_end_cycles` = exec time x the GPU's clock; top-level in newer XLA,
  under `fusion_backend_config` in older).

Each figure is per execution, and XLA counts a while body once; here each is multiplied by how
often its instruction runs (loops, trip counts, branches as the report counts them), summed
for the program, per loop (nested loops inside their parents) and per scope. TPU cycles become
seconds at the chip's clock where the chip is known (`Report.chip`, or `chip=`). This is the
compiler's estimate, not a measurement and not a bound: it sits next to the roofline's lower
bound so a reader can see where the two disagree. `coverage` says how much of the program
carries an estimate: the kernels (top-level instructions that launch work) that have one, and
the share of the program's FLOPs they hold; the rest is not in the total.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from hloflops.scopes import scope_prefix

if TYPE_CHECKING:
    from hloflops.report.chips import Chip
    from hloflops.report.report import Report

# TPU clocks, from each chip's peak bf16 rate and its matrix units (MXU: a 128x128 (v6e: 256x256)
# array of multiply-adds, 2 FLOPs each): v4 275 TFLOP/s = 8 MXUs x 2 x 128^2 x 1.05 GHz; v5e 197 =
# 4 x 2 x 128^2 x 1.5 GHz; v5p 459 = 8 x 2 x 128^2 x 1.75 GHz; v6e 918 = 4 x 2 x 256^2 x 1.75 GHz.
CLOCK_HZ = {"tpu-v4": 1.05e9, "tpu-v5e": 1.5e9, "tpu-v5p": 1.75e9, "tpu-v6e": 1.75e9}
# Kernels: the opcodes that launch work on a device (the rest are bitcasts, tuples, parameters),
# besides any instruction that carries an estimate.
_KERNELS = frozenset({"fusion", "convolution", "dot", "custom-call", "all-reduce", "all-gather", "reduce-scatter",
                      "all-to-all", "collective-permute", "all-reduce-start", "all-gather-start",
                      "collective-permute-start", "copy", "copy-start", "reduce", "sort", "scatter", "gather"})
TPU, GPU = "tpu estimated_cycles", "gpu reification_cost"


@dataclass(frozen=True)
class CompilerEstimate:
    source: str  # TPU or GPU
    cycles: int  # cycles x executions, summed (TPU; GPU: end_to_end_cycles where given)
    seconds: float | None  # TPU: cycles at the chip's clock; GPU: exec_time_us x executions
    clock_hz: float | None
    chip: str | None
    kernels: int  # top-level instructions that launch work
    estimated: int  # of those, the ones that carry an estimate
    flops_share: float  # the share of the program's FLOPs inside estimated kernels
    by_loop: Mapping[str, int] = field(default_factory=dict)  # loop -> cycles (nested loops included)
    by_scope: Mapping[str, int] = field(default_factory=dict)
    roofline_s: float | None = None  # the roofline's lower bound on the same chip, when asked

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "cycles": self.cycles, "seconds": self.seconds, "clock_hz": self.clock_hz,
                "chip": self.chip, "kernels": self.kernels, "kernels_with_estimate": self.estimated,
                "flops_share": self.flops_share, "by_loop": dict(self.by_loop), "by_scope": dict(self.by_scope),
                "roofline_lower_bound_s": self.roofline_s}


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number >= 0 else None


def kernel_estimate(config: Any) -> tuple[str, float, float | None] | None:
    """(source, cycles, microseconds or None) of one instruction's backend_config, or None."""
    if not isinstance(config, dict):
        return None
    window = config.get("window_config")
    if isinstance(window, dict) and "estimated_cycles" in window:
        cycles = _number(window["estimated_cycles"])
        return None if cycles is None else (TPU, cycles, None)
    costs = config.get("reification_cost")
    if costs is None and isinstance(config.get("fusion_backend_config"), dict):
        costs = config["fusion_backend_config"].get("reification_cost")
    if isinstance(costs, dict):
        costs = [costs]
    if isinstance(costs, list) and costs and isinstance(costs[0], dict):
        cycles = _number(costs[0].get("end_to_end_cycles", 0)) or 0.0
        micros = _number(costs[0].get("exec_time_us"))
        return GPU, cycles, micros or None
    return None


def compiler_estimate(report: Report, chip: Chip | None = None) -> CompilerEstimate | None:
    """XLA's own estimate of the report's program, loop-aware; None where no kernel carries one."""
    module = report.module
    if module is None:
        return None
    chip = chip or report.chip_spec()
    by_name = module.by_name
    kernels = estimated = 0
    sources: set[str] = set()
    cycles_total, micros_total, flops_in = 0, 0.0, 0
    by_scope: dict[str, int] = {}
    by_loop = {lp.name: 0 for lp in report.loops}
    parent = {lp.name: lp.parent for lp in report.loops}
    fused_flops: dict[str, int] = {}
    for row in report.rows:  # the FLOPs each top-level fusion holds, over all its executions
        if row.fusion is not None:
            fused_flops[row.fusion] = fused_flops.get(row.fusion, 0) + row.total.flops
    for row in report.rows:
        if row.fusion is not None:
            continue
        comp = by_name.get(row.computation)
        if comp is None or comp.is_fusion_body:
            continue
        inst = comp.by_name[row.name]
        raw = inst.attributes.get("backend_config") or ""
        # (no estimate in it: not worth decoding; GPU modules print empty reification_cost lists)
        has = "estimated_cycles" in raw or "end_to_end_cycles" in raw or "exec_time_us" in raw
        found = kernel_estimate(inst.backend_config) if has else None
        if found is None:
            kernels += row.opcode in _KERNELS
            continue
        source, cycles, micros = found
        sources.add(source)
        kernels += 1  # whatever its opcode: TPU runs a broadcast as a kernel of its own
        estimated += 1
        run_cycles = round(cycles * row.executions)
        cycles_total += run_cycles
        if micros is not None:
            micros_total += micros * row.executions
        flops_in += row.total.flops + fused_flops.get(row.name, 0)
        scope = scope_prefix(row.scope, 3)
        by_scope[scope] = by_scope.get(scope, 0) + run_cycles
        loop = row.loop
        while loop is not None and loop in by_loop:
            by_loop[loop] += run_cycles
            loop = parent.get(loop)
    if not estimated:
        return None
    source = TPU if TPU in sources else GPU
    clock = CLOCK_HZ.get(chip.name) if chip is not None else None
    if source == TPU:
        seconds = cycles_total / clock if clock else None
    else:
        seconds = micros_total * 1e-6 if micros_total else None
    roofline_s = report.roofline(chip).lower_bound_s if chip is not None else None
    return CompilerEstimate(source, cycles_total, seconds, clock, chip.name if chip is not None else None, kernels,
                            estimated, flops_in / report.flops if report.flops else 0.0,
                            {k: v for k, v in by_loop.items() if v},
                            dict(sorted(by_scope.items(), key=lambda kv: (-kv[1], kv[0]))), roofline_s)


def summary_lines(report: Report, chip: Chip | None = None) -> list[str]:
    """The summary's lines for the estimate (none where the module carries no estimate)."""
    est = compiler_estimate(report, chip)
    if est is None:
        return []
    what = "TPU estimated_cycles" if est.source == TPU else "GPU reification_cost"
    line = f"XLA's own estimate of the step ({what} x executions): {est.cycles:,} cycles"
    if est.seconds is not None:
        at = f" at {est.clock_hz / 1e9:g} GHz ({est.chip})" if est.clock_hz else ""
        line += f" = {est.seconds * 1e6:,.3f} us{at}"
    elif est.source == TPU:
        line += " (no chip given: --chip tpu-v5e etc. turns cycles into time)"
    lines = [line, f"  {est.estimated} of {est.kernels} kernels carry an estimate, holding "
                   f"{est.flops_share:.1%} of the flops; the compiler's model, not a measurement"]
    if est.roofline_s is not None:
        lines[-1] += f"; roofline lower bound {est.roofline_s * 1e6:,.3f} us"
    for loop, cycles in est.by_loop.items():
        lines.append(f"  in loop {loop}: {cycles:,} cycles")
    return lines
