"""MFU and HFU of a step: the exact per-device FLOPs of one HLO module over the time the step took
and the devices' peak."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class MFU:
    """Model and hardware FLOPs utilisation of one training/inference step.

    `mfu` uses `model_flops` (the exact loop-aware total minus remat recomputation): the work the
    model needs. `hfu` uses `hardware_flops` (the exact total, remat included): the work the
    hardware did. Both are per-device FLOPs of the HLO module times `num_devices`, divided by
    `step_time_s * peak_flops_per_s * num_devices`. FLOPs follow XLA's convention (2 per
    multiply-add in dots and convolutions, 1 per element for elementwise ops)."""

    mfu: float
    hfu: float
    model_flops: int  # per device, per step
    hardware_flops: int  # per device, per step
    step_time_s: float
    peak_flops_per_s: float  # per device
    num_devices: int
    achieved_model_flops_per_s: float  # all devices together
    achieved_hardware_flops_per_s: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "mfu": self.mfu,
            "hfu": self.hfu,
            "mfu_uses": "model_flops (exact loop-aware flops minus remat recomputation)",
            "hfu_uses": "hardware_flops (exact loop-aware flops, remat included)",
            "model_flops": self.model_flops,
            "hardware_flops": self.hardware_flops,
            "step_time_s": self.step_time_s,
            "peak_flops_per_s": self.peak_flops_per_s,
            "num_devices": self.num_devices,
            "achieved_model_flops_per_s": self.achieved_model_flops_per_s,
            "achieved_hardware_flops_per_s": self.achieved_hardware_flops_per_s,
        }


def utilisation(model_flops: int, hardware_flops: int, step_time_s: float, peak_flops_per_s: float,
                num_devices: int) -> MFU:
    """`MFU` of a step of `step_time_s` seconds on `num_devices` devices of `peak_flops_per_s` each.
    The HLO module is one device's program, so its FLOPs are per device."""
    if step_time_s <= 0 or peak_flops_per_s <= 0:
        raise ValueError("step_time_s and peak_flops_per_s must be positive")
    n = int(num_devices)
    if n < 1:
        raise ValueError("num_devices must be at least 1")
    capacity = step_time_s * peak_flops_per_s * n
    return MFU(
        mfu=model_flops * n / capacity,
        hfu=hardware_flops * n / capacity,
        model_flops=model_flops,
        hardware_flops=hardware_flops,
        step_time_s=float(step_time_s),
        peak_flops_per_s=float(peak_flops_per_s),
        num_devices=n,
        achieved_model_flops_per_s=model_flops * n / step_time_s,
        achieved_hardware_flops_per_s=hardware_flops * n / step_time_s,
    )
