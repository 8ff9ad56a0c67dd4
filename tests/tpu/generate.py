"""Compile the TPU catalogue (tests/tpu/catalogue.py) for real TPU topologies and store the modules.

    python3 -m tests.tpu.generate [OUT_DIR] [--only NAME ...]

needs `jax[tpu]` (libtpu), not a TPU: programs compile ahead of time through
`jax.experimental.topologies`. It writes, per (program, topology), `NAME.TOPO.hlo.gz` (the
optimized module, `compiled.as_text()`), `NAME.TOPO.twin.hlo.gz` where the program has a twin, and
`manifest.json`: XLA's `cost_analysis()` of each, the device kind, and the jax / libtpu versions.
OUT_DIR defaults to tests/data/tpu, which the fast suite reads without libtpu; `.ci/tpu.sh`
regenerates into a temporary folder and runs the same tests on that.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
from pathlib import Path

from tests.tpu.catalogue import BY_NAME, TOPOLOGIES, cases

DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "tpu"
_COST_KEYS = ("flops", "transcendentals", "bytes accessed")


def _write_gz(path: Path, text: str) -> None:
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=9) as f:
        f.write(text.encode())


def _compile(fn, args):
    import jax

    compiled = jax.jit(fn).lower(*args).compile()
    cost = compiled.cost_analysis()
    if isinstance(cost, list):  # older jax: one dict per computation
        cost = cost[0]
    return compiled.as_text(), {k: float(cost.get(k, 0.0)) for k in _COST_KEYS}


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for package in ("jax", "jaxlib", "libtpu"):
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            out[package] = ""
    return out


def generate(out_dir: Path, only: list[str] | None = None) -> dict:
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # another process may hold libtpu's lock
    import jax
    from jax.experimental import topologies

    out_dir.mkdir(parents=True, exist_ok=True)
    manifest: dict = {"versions": _versions(), "modules": {}}
    if only and (out_dir / "manifest.json").exists():  # a partial run updates the others' records
        manifest["modules"] = json.loads((out_dir / "manifest.json").read_text())["modules"]
    topos = {}
    for name, key in cases():
        if only and name not in only:
            continue
        if key not in topos:
            topos[key] = topologies.get_topology_desc(platform="tpu", topology_name=TOPOLOGIES[key])
        devices = list(topos[key].devices)
        built = BY_NAME[name].build(devices)
        text, cost = _compile(*built["program"])
        stem = f"{name}.{key}"
        _write_gz(out_dir / f"{stem}.hlo.gz", text)
        used = jax.tree.leaves(built["program"][1])[0].sharding.mesh.size  # the devices the program runs on
        record = {"topology": TOPOLOGIES[key], "devices": used, "device_kind": devices[0].device_kind,
                  "xla": cost}
        if built.get("twin") is not None:
            twin_text, twin_cost = _compile(*built["twin"])
            _write_gz(out_dir / f"{stem}.twin.hlo.gz", twin_text)
            record["twin_xla"] = twin_cost
        manifest["modules"][stem] = record
        print(f"{stem}: {cost['flops']:,.0f} XLA flops", file=sys.stderr)
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", nargs="?", type=Path, default=DATA_DIR)
    parser.add_argument("--only", nargs="*", default=None)
    options = parser.parse_args(argv)
    generate(options.out_dir, options.only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
