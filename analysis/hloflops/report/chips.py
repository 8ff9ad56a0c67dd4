"""Peak rates of the chips people train on, for the static roofline (hloflops.report.roofline).

Every figure is per chip, dense (NVIDIA lists "with sparsity" figures too: those are twice the
dense ones and are not used), in FLOP/s or bytes/s. `interconnect_bytes_per_s` is what one chip
can SEND: NVIDIA quotes NVLink and Google quotes ICI as the sum of both directions, so it is half
the quoted figure. Keys of `peak_flops_per_s`: fp8, bf16, f16, tf32 (NVIDIA tensor cores, used
for f32 matrix products), f32, f64, int8; a dtype a chip does not list falls back as
`hloflops.report.roofline.peak_key` says (always to a faster rate, so the roofline stays a lower
bound). A chip of your own: `load_chip("spec.json")` with the same fields.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping

T = 10**12
G = 10**9


@dataclass(frozen=True)
class Chip:
    name: str
    peak_flops_per_s: Mapping[str, float]
    hbm_bytes_per_s: float
    interconnect_bytes_per_s: float
    source: str = ""
    aliases: tuple[str, ...] = field(default=())

    @property
    def mfu_peak(self) -> float:
        """The rate MFU is quoted against: dense bf16 (f32 for a chip without bf16)."""
        return float(self.peak_flops_per_s.get("bf16") or self.peak_flops_per_s["f32"])

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "peak_flops_per_s": {k: float(v) for k, v in sorted(self.peak_flops_per_s.items())},
            "hbm_bytes_per_s": float(self.hbm_bytes_per_s),
            "interconnect_bytes_per_s": float(self.interconnect_bytes_per_s),
            "source": self.source,
        }


CHIPS: tuple[Chip, ...] = (
    # NVIDIA A100 Tensor Core GPU datasheet (2021), SXM 80GB column: FP64 Tensor Core 19.5 TF,
    # FP32 19.5 TF, TF32 156 TF, BF16/FP16 312 TF, INT8 624 TOPS, HBM2e 2,039 GB/s,
    # NVLink 600 GB/s (both directions).
    Chip("a100", {"f64": 19.5 * T, "f32": 19.5 * T, "tf32": 156 * T, "bf16": 312 * T, "f16": 312 * T,
                  "int8": 624 * T}, 2039 * G, 300 * G,
         "NVIDIA A100 Tensor Core GPU datasheet, SXM 80GB", ("a100-sxm", "a100-80gb")),
    # NVIDIA H100 Tensor Core GPU datasheet, H100 SXM column: FP64 Tensor Core 67 TF, FP32 67 TF,
    # TF32 989 TF*, BF16/FP16 1,979 TF*, FP8 3,958 TF*, INT8 3,958 TOPS* (* with sparsity: halved
    # here), GPU memory bandwidth 3.35 TB/s, NVLink 900 GB/s.
    Chip("h100", {"f64": 67 * T, "f32": 67 * T, "tf32": 494.5 * T, "bf16": 989.5 * T, "f16": 989.5 * T,
                  "fp8": 1979 * T, "int8": 1979 * T}, 3350 * G, 450 * G,
         "NVIDIA H100 Tensor Core GPU datasheet, H100 SXM", ("h100-sxm", "h100sxm")),
    # NVIDIA H200 Tensor Core GPU datasheet, H200 SXM column: same tensor rates as H100 SXM
    # (TF32 989 TF*, BF16 1,979 TF*, FP8 3,958 TF*), HBM3e 4.8 TB/s, NVLink 900 GB/s.
    Chip("h200", {"f64": 67 * T, "f32": 67 * T, "tf32": 494.5 * T, "bf16": 989.5 * T, "f16": 989.5 * T,
                  "fp8": 1979 * T, "int8": 1979 * T}, 4800 * G, 450 * G,
         "NVIDIA H200 Tensor Core GPU datasheet, H200 SXM", ("h200-sxm",)),
    # NVIDIA HGX B200 datasheet (8 GPUs; per GPU = /8): FP64 296 TF, FP32 600 TF, TF32 18 PF*,
    # BF16/FP16 36 PF*, FP8 72 PF*, INT8 72 POPS* (* with sparsity: halved here), HBM3e 64 TB/s,
    # fifth-generation NVLink 1.8 TB/s per GPU.
    Chip("b200", {"f64": 37 * T, "f32": 75 * T, "tf32": 1125 * T, "bf16": 2250 * T, "f16": 2250 * T,
                  "fp8": 4500 * T, "int8": 4500 * T}, 8000 * G, 900 * G,
         "NVIDIA HGX B200 datasheet, per GPU", ("b200-sxm", "hgx-b200")),
    # Cloud TPU v4 system architecture (cloud.google.com/tpu/docs/v4): 275 TFLOPs bf16 or int8,
    # HBM2 1,200 GBps. ICI: six links per chip at 50 GB/s each way (Jouppi et al., "TPU v4: An
    # Optically Reconfigurable Supercomputer", ISCA 2023), 300 GB/s out of a chip.
    Chip("tpu-v4", {"bf16": 275 * T, "int8": 275 * T}, 1200 * G, 300 * G,
         "Cloud TPU v4 documentation; ICI from the TPU v4 ISCA 2023 paper", ("v4", "tpuv4")),
    # Cloud TPU v5e (cloud.google.com/tpu/docs/v5e, and the v6e page's comparison table): 197 TFLOPs
    # bf16, 394 TOPs int8, HBM 819 GBps, ICI 1,600 Gbps = 200 GB/s per direction.
    Chip("tpu-v5e", {"bf16": 197 * T, "int8": 394 * T}, 819 * G, 200 * G,
         "Cloud TPU v5e documentation", ("v5e", "tpuv5e", "v5litepod")),
    # Cloud TPU v5p (docs.cloud.google.com/tpu/docs/v5p): 459 TFLOPs bf16, 459 TFLOPs fp8, 918 TOPs
    # int8, HBM 2,765 GBps, bidirectional ICI 1,200 GBps per chip (4,800 Gbps each way).
    Chip("tpu-v5p", {"bf16": 459 * T, "fp8": 459 * T, "int8": 918 * T}, 2765 * G, 600 * G,
         "Cloud TPU v5p documentation", ("v5p", "tpuv5p")),
    # Cloud TPU v6e Trillium (docs.cloud.google.com/tpu/docs/v6e): 918 TFLOPs bf16, 1,836 TOPs int8,
    # HBM 1,600 GBps, bidirectional ICI 800 GBps per chip.
    Chip("tpu-v6e", {"bf16": 918 * T, "int8": 1836 * T}, 1600 * G, 400 * G,
         "Cloud TPU v6e (Trillium) documentation", ("v6e", "tpuv6e", "trillium")),
)

_RATE_KEYS = ("fp8", "bf16", "f16", "tf32", "f32", "f64", "int8")


def chip_names() -> list[str]:
    return [c.name for c in CHIPS]


def find_chip(name: str) -> Chip | None:
    wanted = name.strip().lower().replace("_", "-").replace(" ", "-")
    for chip in CHIPS:
        if wanted == chip.name or wanted in chip.aliases:
            return chip
    return None


def chip_from_dict(spec: Mapping[str, Any], origin: str = "spec") -> Chip:
    """A chip from a JSON object with the fields of `Chip.as_dict()`. Raises ValueError."""
    try:
        peaks = {str(k): float(v) for k, v in dict(spec["peak_flops_per_s"]).items()}
        hbm = float(spec["hbm_bytes_per_s"])
        net = float(spec["interconnect_bytes_per_s"])
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{origin}: a chip needs peak_flops_per_s {{dtype: FLOP/s}}, hbm_bytes_per_s and "
                         f"interconnect_bytes_per_s ({type(error).__name__}: {error})") from None
    unknown = sorted(set(peaks) - set(_RATE_KEYS))
    if unknown:
        raise ValueError(f"{origin}: unknown peak_flops_per_s keys {unknown} (use {', '.join(_RATE_KEYS)})")
    if not peaks or min([hbm, net, *peaks.values()]) <= 0:
        raise ValueError(f"{origin}: every rate must be positive")
    if "bf16" not in peaks and "f32" not in peaks:
        raise ValueError(f"{origin}: peak_flops_per_s needs bf16 or f32")
    return Chip(str(spec.get("name", origin)), peaks, hbm, net, str(spec.get("source", origin)))


def load_chip(name_or_path: str) -> Chip:
    """A built-in chip by name (`h100`, `tpu-v5p`, ...) or a JSON spec file. Raises ValueError."""
    chip = find_chip(name_or_path)
    if chip is not None:
        return chip
    if name_or_path.endswith(".json"):
        try:
            with open(name_or_path, encoding="utf-8") as f:
                spec = json.load(f)
        except OSError as error:
            raise ValueError(f"{name_or_path}: cannot read: {error.strerror}") from None
        except json.JSONDecodeError as error:
            raise ValueError(f"{name_or_path}: not JSON: {error}") from None
        if not isinstance(spec, dict):
            raise ValueError(f"{name_or_path}: expected a JSON object")
        return chip_from_dict(spec, name_or_path)
    raise ValueError(f"unknown chip {name_or_path!r}: one of {', '.join(chip_names())}, or a spec.json")
