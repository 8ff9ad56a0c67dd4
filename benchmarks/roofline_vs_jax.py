"""hloflops' static roofline next to jax.experimental.roofline, on the same shard_map programs.

    python3 benchmarks/roofline_vs_jax.py > benchmarks/results/roofline_vs_jax.md

Runs itself again with 8 host devices when fewer are visible. For each program: FLOPs, HBM
bytes and bytes sent per device as each tool counts them (jax's `RooflineResult.flops`,
`hbm_bytes`, `ici_bytes` summed over axes; ours from the compiled module, loops multiplied), and
the time each implies on two chips (jax: max of the three totals over the chip's rates; ours: the
per-instruction roofline lower bound).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEVICES = 8
CHIPS = ("h100", "tpu-v5p")


def programs():
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax
    from jax.sharding import PartitionSpec as P

    block = jax.ShapeDtypeStruct((DEVICES * 16, 32), np.float32)

    def psum_scan(x):
        # `c +` keeps the carry device-varying, as jax's shard_map checks
        return lax.scan(lambda c, _: (c + lax.psum(c, "x") * 0.5, None), x, None, length=3)[0]

    def ring_fori(x):
        perm = [(i, (i + 1) % DEVICES) for i in range(DEVICES)]
        return lax.fori_loop(0, 4, lambda i, c: lax.ppermute(c, "x", perm) * 0.5, x)

    weights = jax.ShapeDtypeStruct((4, 32, 32), np.float32)

    def tp_layers(x, ws):  # each device holds all 4 layers' 32 x 32 weights; a psum after each matmul
        return lax.scan(lambda h, w: (h + jnp.tanh(lax.psum(h @ w, "x")), None), x, ws)[0]

    yield "psum in a scan of 3", psum_scan, (P("x"),), P("x"), (block,)
    yield "ppermute ring in a fori_loop of 4", ring_fori, (P("x"),), P("x"), (block,)
    yield "matmul + psum per layer, scan of 4", tp_layers, (P("x"), P()), P("x"), (block, weights)


def main() -> None:
    import jax
    import numpy as np
    from jax.experimental import roofline as jax_roofline
    from jax.sharding import Mesh

    sys.path.insert(0, str(ROOT))
    from hloflops import analyze
    from hloflops.report.chips import load_chip

    mesh = Mesh(np.array(jax.devices()[:DEVICES]), ("x",))
    print("| program | tool | flops | HBM bytes | bytes sent / device | " + " | ".join(
        f"time on {c} (us)" for c in CHIPS) + " |")
    print("|---|---|---:|---:|---:|" + "---:|" * len(CHIPS))
    for name, fn, in_specs, out_specs, args in programs():
        _, res = jax_roofline.roofline(fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs)(*args)
        ici = sum(res.ici_bytes.values())
        sharded = jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False))
        report = analyze(sharded.lower(*args).compile().as_text())
        jax_times, our_times = [], []
        for chip_name in CHIPS:
            chip = load_chip(chip_name)
            jax_times.append(max(res.flops / chip.peak_flops_per_s.get("f32", chip.mfu_peak),
                                 res.hbm_bytes / chip.hbm_bytes_per_s, ici / chip.interconnect_bytes_per_s))
            our_times.append(report.roofline(chip).lower_bound_s)
        print(f"| {name} | jax.experimental.roofline | {res.flops:,} | {res.hbm_bytes:,} | {ici:,} | "
              + " | ".join(f"{t * 1e6:.4f}" for t in jax_times) + " |")
        print(f"| | hloflops | {report.flops:,} | {report.bytes_accessed:,} | {report.communication_bytes:,} | "
              + " | ".join(f"{t * 1e6:.4f}" for t in our_times) + " |")


if __name__ == "__main__":
    import jax

    if len(jax.devices()) < DEVICES:
        env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={DEVICES}", JAX_PLATFORMS="cpu")
        sys.exit(subprocess.call([sys.executable, __file__], env=env))
    main()
